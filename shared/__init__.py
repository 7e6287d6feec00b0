"""What kforge's services share: events, the event store, the bus, projections and settings.

Services never import each other; everything they exchange is defined here.
"""
