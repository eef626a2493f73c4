"""The operator console: the four services seen and steered from a browser (docs/console.md)."""
