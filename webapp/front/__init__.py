"""The front page and link previews."""
