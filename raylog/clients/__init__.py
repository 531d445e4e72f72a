"""The Python clients: connect(), Producer, Consumer, Admin."""
