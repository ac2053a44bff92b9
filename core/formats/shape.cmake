# owned by the shape engineer
