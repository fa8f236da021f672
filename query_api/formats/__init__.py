"""Provider formats on the query side: one renderer and one rule checker per format."""
