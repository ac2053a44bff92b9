# owned by the safetensors engineer
