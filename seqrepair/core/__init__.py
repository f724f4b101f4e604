"""The sans-IO core: pure state machines with no sockets, no Redis, no Spark and no clock."""
