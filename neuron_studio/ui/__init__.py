"""Notebook rendering."""
