"""The thin command-line layer: parse flags, call one library function, render with rich."""
