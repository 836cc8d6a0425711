"""The `code_interpreter` verl tool, the shared code-judge client and the lenient tool-call parser."""
