"""The use cases: one method each, which validates, writes, publishes after the write and cascades.
Adapters call them; they never import an adapter, and no concern imports them."""
