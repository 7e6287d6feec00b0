"""kforge's services. Each is a folder of handlers plus a small domain; they share only `shared/`."""
