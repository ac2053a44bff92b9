# owned by the gguf engineer
