"""The Python clients: connect(), Producer, Consumer, Admin, and transactional_copy (an
exactly-once consume-transform-produce loop)."""
