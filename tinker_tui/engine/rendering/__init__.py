"""Messages <-> tokens: which renderer a model gets, and the end tokens it declares."""
