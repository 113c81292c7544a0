"""Attention: relevance tracking, supplementary input, the context window and topic shifts."""
