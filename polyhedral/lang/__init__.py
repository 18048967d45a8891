"""The TC language: lexer, parser, AST, semantic checks, range inference, canonical printing."""
