"""Rollouts of the CLEANER agent loop against running inference servers (SGLang, vLLM, llama.cpp)."""
