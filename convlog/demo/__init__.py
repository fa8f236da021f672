"""``convlog demo``: ``run`` appends the demo conversations and prints them back; ``data`` holds them."""
