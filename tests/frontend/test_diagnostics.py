"""Diagnostics of the TC front-end: every bad program is refused with the right class, position and words.

The table ``BAD`` holds (id, source, error class, line, column, words): ``check_source`` must raise
exactly that class (not a subclass, not a parent), with the caret at that 1-based line and column,
and a message containing every word. Sources are written one line per list item so that positions
can be counted by hand: a body line ``    B(i) = A(i)`` has ``B`` at column 5, ``=`` at 10 and
``A`` at 12. The table covers the diagnostics catalogue of docs/language.md (tc-language.md) and
the rules the checker adds (reductions may not read their own tensor, ``=`` reads its own tensor
only at the element it writes, no ``%`` on floats, affine where-conditions, literals that fit).

A row may carry ``bug=`` to pin a known front-end bug as a strict xfail until it is fixed.
The second half checks programs that must pass (the 15 kernels of KERNELS.md, extensions) and the
shapes and ranges range inference gives them.
"""

from __future__ import annotations

import pickle
import re
import warnings

import pytest

from tcjit.polyhedral.errors import (
    Span,
    TCBoundsError,
    TCCallError,
    TCError,
    TCInternalError,
    TCNameError,
    TCRangeError,
    TCSemanticError,
    TCSyntaxError,
    TCTypeError,
    TCWarning,
)
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.lang.parser import MAX_DEPTH, MAX_NESTING, parse
from tcjit.polyhedral.lang.sizes import const, sym
from tcjit.suite import SUITE


def known_bug(reason: str) -> pytest.MarkDecorator:
    """A known front-end bug: the test fails until it is fixed (strict xfail)."""
    return pytest.mark.xfail(strict=True, reason=f"checker bug: {reason}")


def text(lines: list[str]) -> str:
    """The source made of ``lines``, each ended by a newline."""
    return "".join(line + "\n" for line in lines)


def case(id, lines, cls, line, col, words, bug=None):
    """One row of the table; ``bug`` marks a known front-end bug (strict xfail)."""
    marks = [known_bug(bug)] if bug else []
    return pytest.param(text(lines) if isinstance(lines, list) else lines, cls, line, col, words,
                        id=id, marks=marks)  # fmt: skip


HEAD = "def f(float(N) A) -> (B) {"

# fmt: off
BAD = [
    # ------------------------------------------------------------------ unexpected token / syntax
    case("missing_arrow", [
        "def f(float(N) A) (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 19, ["expected", "'->'", "'('"]),
    case("unclosed_parameter_list", [
        "def f(float(N) A -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 18, ["expected", "')'", "parameter", "'->'"]),
    case("outputs_without_parentheses", [
        "def f(float(N) A) -> B {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 22, ["expected", "'('", "outputs", "'B'"]),
    case("missing_open_brace", [
        "def f(float(N) A) -> (B)",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 2, 5, ["expected", "'{'", "body", "'B'"]),
    case("not_a_def", [
        "fed f(float(N) A) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 1, ["expected", "'def'", "'fed'"]),
    case("def_name_is_a_number", [
        "def 3(float(N) A) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 5, ["expected", "name", "definition", "'3'"]),
    case("output_name_is_a_number", [
        "def f(float(N) A) -> (float(N) 3) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 32, ["expected", "name", "output", "'3'"]),
    case("float_size", [
        "def f(float(1.5) A) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 13, ["expected", "size", "'1.5'"]),
    case("colon_equals_operator", [
        HEAD,
        "    B(i) := A(i)",
        "}",
    ], TCSyntaxError, 2, 10, ["expected", "assignment operator", "+=!", "':'"]),
    case("comparison_instead_of_assignment", [
        HEAD,
        "    B(i) == A(i)",
        "}",
    ], TCSyntaxError, 2, 10, ["expected", "assignment operator", "'=='"]),
    case("unclosed_left_hand_side", [
        HEAD,
        "    B(i = A(i)",
        "}",
    ], TCSyntaxError, 2, 9, ["expected", "')'", "left-hand side", "'='"]),
    case("dangling_operator", [
        HEAD,
        "    B(i) = A(i) +",
        "}",
    ], TCSyntaxError, 3, 1, ["expected an expression", "'}'"]),
    case("missing_operand_in_subscript", [
        HEAD,
        "    B(i) = A(i +)",
        "}",
    ], TCSyntaxError, 2, 17, ["expected an expression", "')'"]),
    case("range_without_colon", [
        HEAD,
        "    B(i) = A(i) where i in 0 N",
        "}",
    ], TCSyntaxError, 2, 30, ["expected", "':'", "range", "'N'"]),
    case("select_without_colon", [
        HEAD,
        "    B(i) = A(i) > 0.0 ? A(i) 0.0",
        "}",
    ], TCSyntaxError, 2, 30, ["expected", "':'", "'c ? a : b'", "'0.0'"]),
    case("keyword_as_expression", [
        HEAD,
        "    B(i) = where",
        "}",
    ], TCSyntaxError, 2, 12, ["expected an expression", "keyword", "'where'"]),
    case("exists_without_access", [
        HEAD,
        "    B(i) = A(i) where exists 3",
        "}",
    ], TCSyntaxError, 2, 30, ["expected", "tensor access", "'exists'"]),
    case("dimension_size_without_number", [
        HEAD,
        "    B(i) = A.x",
        "}",
    ], TCSyntaxError, 2, 14, ["expected", "dimension number", "'A.'", "'x'"]),
    case("malformed_number", [
        HEAD,
        "    B(i) = 1abc",
        "}",
    ], TCSyntaxError, 2, 12, ["malformed number", "'1abc'"]),
    case("conversion_with_two_arguments", [
        HEAD,
        "    B(i) = float(A(i), 1)",
        "}",
    ], TCSyntaxError, 2, 12, ["conversion", "float", "one argument", "2"]),
    # ------------------------------------------------------------------------- lexical / body
    case("unknown_character_at", [
        HEAD,
        "    B(i) = A(i) @ 2",
        "}",
    ], TCSyntaxError, 2, 17, ["unexpected character", "'@'"]),
    case("unknown_character_semicolon", [
        HEAD,
        "    B(i) = A(i);",
        "}",
    ], TCSyntaxError, 2, 16, ["unexpected character", "';'"]),
    case("unknown_character_unicode", [
        HEAD,
        "    B(i) = A(i) λ",
        "}",
    ], TCSyntaxError, 2, 17, ["unexpected character", "'λ'"]),
    case("unknown_character_in_signature", [
        "def f(float(N) A) -> (B$) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 24, ["unexpected character", "'$'"]),
    case("unknown_character_superscript_digit", [
        HEAD,
        "    B(i) = A(i) * ²",
        "}",
    ], TCSyntaxError, 2, 19, ["unexpected character"]),
    case("unknown_character_arabic_digit", [
        HEAD,
        "    B(i) = A(i) * ٣",
        "}",
    ], TCSyntaxError, 2, 19, ["unexpected character"]),
    case("unterminated_empty_body", "def f(float(N) A) -> (B) {",
         TCSyntaxError, 1, 27, ["expected", "'}'", "body", "'f'", "end of input"]),
    case("unterminated_body_after_statement", HEAD + "\n    B(i) = A(i)",
         TCSyntaxError, 2, 16, ["'}'", "end of input"]),
    case("unterminated_body_trailing_newline", [
        HEAD,
        "    B(i) = A(i)",
    ], TCSyntaxError, 3, 1, ["'}'", "end of input"]),
    case("unary_nesting_beyond_limit", [
        HEAD,
        "    B(i) = " + "-" * (MAX_NESTING + 1) + "A(i)",
        "}",
    ], TCSyntaxError, 2, 13 + MAX_NESTING, ["nested", str(MAX_NESTING)]),
    case("operator_chain_beyond_limit", [
        HEAD,
        "    B(i) = " + " + ".join(["A(i)"] * (MAX_DEPTH + 3)),
        "}",
    ], TCSyntaxError, 2, 12, ["levels deep", str(MAX_DEPTH)]),
    # --------------------------------------------------------------------------- scalar types
    case("unknown_scalar_type_parameter", [
        "def f(floot(N) A) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 7, ["unknown scalar type", "'floot'"]),
    case("unknown_scalar_type_output", [
        "def f(float(N) A) -> (float(N) B, int(N) C) {",
        "    B(i) = A(i)",
        "}",
    ], TCSyntaxError, 1, 35, ["unknown scalar type", "'int'"]),
    # ------------------------------------------------------------------------------- names
    case("undefined_variable", [
        HEAD,
        "    B(i) = A(i) * x",
        "}",
    ], TCNameError, 2, 19, ["undefined", "'x'"]),
    case("undefined_tensor", [
        HEAD,
        "    B(i) = C(i)",
        "}",
    ], TCNameError, 2, 12, ["undefined", "'C'"]),
    case("duplicate_definition", [
        HEAD,
        "    B(i) = A(i)",
        "}",
        "def f(float(N) A) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCNameError, 4, 5, ["duplicate", "'f'", "line 1"]),
    case("duplicate_argument", [
        "def f(float(N) A, float(N) A) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCNameError, 1, 19, ["duplicate", "argument", "'A'"]),
    case("duplicate_output", [
        "def f(float(N) A) -> (B, B) {",
        "    B(i) = A(i)",
        "}",
    ], TCNameError, 1, 26, ["duplicate", "'B'", "outputs"]),
    case("output_named_like_input", [
        "def f(float(N) A) -> (A) {",
        "    A(i) = 1.0",
        "}",
    ], TCNameError, 1, 23, ["duplicate", "'A'"]),
    case("size_and_tensor_argument", [
        "def f(float(N) A, float(A) C) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCNameError, 1, 25, ["'A'", "size", "argument"]),
    case("size_and_scalar_argument", [
        "def f(float(N) A, float N) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCNameError, 1, 19, ["'N'", "size", "argument"]),
    case("size_and_output", [
        "def f(float(N) A) -> (N) {",
        "    N(i) = A(i)",
        "}",
    ], TCNameError, 1, 23, ["'N'", "size", "output"]),
    case("output_size_not_an_input_size", [
        "def f(float(N) A) -> (float(M) B) {",
        "    B(i) = A(i)",
        "}",
    ], TCNameError, 1, 29, ["size", "'M'", "output", "input"]),
    case("redefined_builtin_argument", [
        "def f(float(N) exp) -> (B) {",
        "    B(i) = exp(i)",
        "}",
    ], TCNameError, 1, 7, ["argument", "'exp'", "builtin"]),
    case("redefined_builtin_size", [
        "def f(float(exp) A) -> (B) {",
        "    B(i) = A(i)",
        "}",
    ], TCNameError, 1, 13, ["size", "'exp'", "builtin"]),
    case("redefined_builtin_index", [
        HEAD,
        "    B(exp) = A(exp)",
        "}",
    ], TCNameError, 2, 7, ["index", "'exp'", "builtin"]),
    case("redefined_builtin_let", [
        HEAD,
        "    B(i) = A(i) where tanh = 1",
        "}",
    ], TCNameError, 2, 23, ["let-binding", "'tanh'", "builtin"]),
    case("redefined_builtin_temporary", [
        HEAD,
        "    B(i) = A(i)",
        "    exp(i) = B(i)",
        "}",
    ], TCNameError, 3, 5, ["tensor", "'exp'", "builtin"]),
    case("reserved_word_argument", [
        "def f(float(N) where) -> (B) {",
        "    B(i) = 1.0 where i in 0:N",
        "}",
    ], TCNameError, 1, 7, ["argument", "'where'", "reserved"]),
    case("type_name_argument", [
        "def f(float(N) int32) -> (B) {",
        "    B(i) = 1.0 where i in 0:N",
        "}",
    ], TCNameError, 1, 7, ["argument", "'int32'", "reserved"]),
    case("size_as_index", [
        HEAD,
        "    B(N) = A(N)",
        "}",
    ], TCNameError, 2, 7, ["size", "'N'", "index"]),
    case("tensor_as_index", [
        HEAD,
        "    B(A) = A(0)",
        "}",
    ], TCNameError, 2, 7, ["tensor", "'A'", "index"]),
    case("two_ranges_for_one_index", [
        HEAD,
        "    B(i) = A(i) where i in 0:N, i in 0:N",
        "}",
    ], TCNameError, 2, 33, ["two ranges", "'i'"]),
    case("let_binding_shadows_let", [
        HEAD,
        "    B(i) = A(i) where x = 1, x = 2",
        "}",
    ], TCNameError, 2, 30, ["let-binding", "'x'", "shadows"]),
    case("let_binding_shadows_index", [
        HEAD,
        "    B(i) = A(i) where i = 1",
        "}",
    ], TCNameError, 2, 23, ["let-binding", "'i'", "shadows"]),
    case("undefined_size_in_range", [
        HEAD,
        "    B(i) = A(i) where i in 0:M",
        "}",
    ], TCNameError, 2, 30, ["undefined size", "'M'", "range"]),
    case("dimension_of_undefined_tensor", [
        HEAD,
        "    B(i) = A(i) where i in 0:C.0",
        "}",
    ], TCNameError, 2, 30, ["'C.0'", "no defined tensor"]),
    # ------------------------------------------------------------------------------- types
    case("tensor_used_as_scalar", [
        HEAD,
        "    B(i) = A",
        "}",
    ], TCTypeError, 2, 12, ["'A'", "rank 1", "scalar"]),
    case("scalar_used_as_tensor", [
        "def f(float(N) A, float alpha) -> (B) {",
        "    B(i) = alpha(i)",
        "}",
    ], TCTypeError, 2, 12, ["'alpha'", "scalar", "not a tensor"]),
    case("size_used_as_tensor", [
        HEAD,
        "    B(i) = N(i)",
        "}",
    ], TCTypeError, 2, 12, ["'N'", "size", "not a tensor"]),
    case("non_integral_index_literal", [
        HEAD,
        "    B(i) = A(i * 1.5)",
        "}",
    ], TCTypeError, 2, 14, ["subscript", "'A'", "integer", "float32"]),
    case("non_integral_index_tensor", [
        HEAD,
        "    B(i) = A(A(i))",
        "}",
    ], TCTypeError, 2, 14, ["subscript", "'A'", "integer", "float32"]),
    case("boolean_index", [
        HEAD,
        "    B(i) = A(i < 2)",
        "}",
    ], TCTypeError, 2, 14, ["subscript", "integer", "bool"]),
    case("non_boolean_where_condition", [
        HEAD,
        "    B(i) = A(i) where i + 1",
        "}",
    ], TCTypeError, 2, 23, ["where condition", "boolean", "int64"]),
    case("non_boolean_select_condition", [
        HEAD,
        "    B(i) = A(i) ? 1.0 : 0.0",
        "}",
    ], TCTypeError, 2, 12, ["condition", "'?:'", "boolean", "float32"]),
    case("not_of_a_float", [
        HEAD,
        "    B(i) = !A(i)",
        "}",
    ], TCTypeError, 2, 13, ["'!'", "boolean", "float32"]),
    case("and_of_a_float", [
        HEAD,
        "    B(i) = A(i) && 1",
        "}",
    ], TCTypeError, 2, 12, ["'&&'", "boolean", "float32"]),
    case("tensor_access_in_range", [
        HEAD,
        "    B(i) = A(i) where i in 0:A(0)",
        "}",
    ], TCTypeError, 2, 30, ["tensor access", "none is allowed", "range"]),
    case("tensor_access_in_condition", [
        HEAD,
        "    B(i) = A(i) where i in 0:N, A(i) > 0",
        "}",
    ], TCTypeError, 2, 33, ["tensor access", "none is allowed", "condition"]),
    case("float_range_bound", [
        HEAD,
        "    B(i) = A(i) where i in 0:1.5",
        "}",
    ], TCTypeError, 2, 30, ["range", "integer", "float"]),
    case("scalar_argument_in_range", [
        "def f(float(N) A, float s) -> (B) {",
        "    B(i) = A(i) where i in 0:s",
        "}",
    ], TCTypeError, 2, 30, ["argument", "'s'", "range", "sizes"]),
    case("non_affine_range_bound", [
        HEAD,
        "    B(i) = A(i) where i in 0:N % 2",
        "}",
    ], TCTypeError, 2, 30, ["range", "size expression"]),
    case("dimension_out_of_rank", [
        HEAD,
        "    B(i) = A(i) where i in 0:A.1",
        "}",
    ], TCTypeError, 2, 30, ["'A'", "1 dimensions", "'A.1'"]),
    case("builtin_arity_too_many", [
        HEAD,
        "    B(i) = exp(A(i), 1)",
        "}",
    ], TCTypeError, 2, 12, ["'exp'", "1 argument", "got 2"]),
    case("builtin_arity_too_few", [
        HEAD,
        "    B(i) = fma(A(i), 1)",
        "}",
    ], TCTypeError, 2, 12, ["'fma'", "3 arguments", "got 2"]),
    case("builtin_arity_none", [
        HEAD,
        "    B(i) = fmax()",
        "}",
    ], TCTypeError, 2, 12, ["'fmax'", "2 arguments", "got 0"]),
    case("min_arity", [
        HEAD,
        "    B(i) = min(A(i))",
        "}",
    ], TCTypeError, 2, 12, ["'min'", "2 arguments", "got 1"]),
    case("wrong_number_of_dimensions_read", [
        HEAD,
        "    B(i) = A(i, 0)",
        "}",
    ], TCTypeError, 2, 12, ["wrong number of dimensions", "'A'", "1", "2"]),
    case("wrong_number_of_dimensions_exists", [
        HEAD,
        "    B(i) = A(i) where exists A(i, 0)",
        "}",
    ], TCTypeError, 2, 30, ["wrong number of dimensions", "'A'"]),
    case("wrong_number_of_dimensions_redefinition", [
        HEAD,
        "    B(i) = A(i)",
        "    B(i, j) = A(i) where j in 0:N",
        "}",
    ], TCTypeError, 3, 5, ["wrong number of dimensions", "'B'", "rank 1", "2 subscripts"]),
    case("output_rank_mismatch", [
        "def f(float(N) A) -> (float(N, N) B) {",
        "    B(i) = A(i)",
        "}",
    ], TCTypeError, 2, 5, ["wrong number of dimensions", "output", "'B'", "rank 2", "1 subscript"]),
    case("narrowing_float_to_int", [
        "def f(float(N) A) -> (int32(N) B) {",
        "    B(i) = A(i)",
        "}",
    ], TCTypeError, 2, 5, ["narrowing", "float32", "int32", "'B'"]),
    case("narrowing_float_literal_to_int", [
        "def f(float(N) A) -> (int32 B) {",
        "    B(i) = 1.5 where i in 0:N",
        "}",
    ], TCTypeError, 2, 5, ["narrowing", "float", "int32", "'B'"]),
    case("narrowing_float32_to_half", [
        "def f(float(N) A) -> (half(N) B) {",
        "    B(i) = A(i)",
        "}",
    ], TCTypeError, 2, 5, ["narrowing", "float32", "float16"]),
    case("narrowing_int32_to_int8", [
        "def f(int32(N) A) -> (int8(N) B) {",
        "    B(i) = A(i)",
        "}",
    ], TCTypeError, 2, 5, ["narrowing", "int32", "int8"]),
    case("narrowing_signed_to_unsigned", [
        "def f(int32(N) A) -> (uint32(N) B) {",
        "    B(i) = A(i)",
        "}",
    ], TCTypeError, 2, 5, ["narrowing", "int32", "uint32"]),
    case("float_modulo", [
        HEAD,
        "    B(i) = A(i) % 2",
        "}",
    ], TCTypeError, 2, 12, ["'%'", "integer", "float32"]),
    case("float_modulo_of_builtin", [
        HEAD,
        "    B(i) = fmod(A(i), 2.0) % 2.0",
        "}",
    ], TCTypeError, 2, 12, ["'%'", "integer"]),
    case("where_condition_with_or", [
        HEAD,
        "    B(i) = A(i) where i < 3 || i > 5",
        "}",
    ], TCTypeError, 2, 23, ["where condition", "comparisons", "affine", "&&"]),
    case("where_condition_not_affine", [
        HEAD,
        "    B(i) = A(i) where i * i < 4",
        "}",
    ], TCTypeError, 2, 23, ["where condition", "affine"]),
    case("literal_does_not_fit_operand_type", [
        "def f(int8(N) A) -> (B) {",
        "    B(i) = A(i) + 300",
        "}",
    ], TCTypeError, 2, 19, ["300", "does not fit", "int8"]),
    case("literal_does_not_fit_output_type", [
        "def f(float(N) A) -> (int8(N) B) {",
        "    B(i) = 300 where i in 0:N",
        "}",
    ], TCTypeError, 2, 12, ["300", "does not fit", "int8"]),
    case("literal_does_not_fit_int64", [
        HEAD,
        "    B(i) = 99999999999999999999 where i in 0:N",
        "}",
    ], TCTypeError, 2, 12, ["99999999999999999999", "int64"]),
    case("literal_beyond_pythons_digit_limit", [
        HEAD,
        "    B(i) = A(i) + " + "9" * 5000,
        "}",
    ], TCTypeError, 2, 19, ["99999999...99999999", "5000 digits", "does not fit int64"]),
    case("dimension_literal_beyond_pythons_digit_limit", [
        "def f(float(N, " + "7" * 5000 + ") A) -> (B) {",
        "    B(i, j) = A(i, j)",
        "}",
    ], TCTypeError, 1, 16, ["5000 digits", "does not fit int64"]),
    case("dimension_number_beyond_pythons_digit_limit", [
        HEAD,
        "    B(i) = A(i) + A." + "1" * 5000,
        "}",
    ], TCTypeError, 2, 21, ["5000 digits", "does not fit int64"]),
    case("negative_literal_does_not_fit_unsigned", [
        "def f(float(N) A) -> (uint8(N) B) {",
        "    B(i) = -1 where i in 0:N",
        "}",
    ], TCTypeError, 2, 12, ["-1", "does not fit", "uint8"]),
    # ---------------------------------------------------------------------- rules of the language
    case("write_to_input", [
        HEAD,
        "    A(i) = 1.0",
        "    B(i) = A(i)",
        "}",
    ], TCSemanticError, 2, 5, ["input", "'A'", "immutable"]),
    case("write_to_scalar_argument", [
        "def f(float(N) A, float s) -> (B) {",
        "    s = 1.0",
        "    B(i) = A(i)",
        "}",
    ], TCSemanticError, 2, 5, ["input", "'s'"]),
    case("write_to_size", [
        HEAD,
        "    N = 1",
        "    B(i) = A(i)",
        "}",
    ], TCSemanticError, 2, 5, ["size", "'N'"]),
    case("reduction_index_with_assignment", [
        "def f(float(N, M) A) -> (B) {",
        "    B(i) = A(i, r_j)",
        "}",
    ], TCSemanticError, 2, 17, ["reduction index", "'r_j'", "'='"]),
    case("range_clause_index_with_assignment", [
        HEAD,
        "    B(i) = A(i) + A(r) where r in 0:N",
        "}",
    ], TCSemanticError, 2, 21, ["reduction index", "'r'", "'='"]),
    case("reduction_reads_its_tensor", [
        HEAD,
        "    B(i) = A(i)",
        "    B(i) += B(i)",
        "}",
    ], TCSemanticError, 3, 13, ["reduction", "'B'", "may not read"]),
    case("initialising_reduction_reads_its_tensor", [
        HEAD,
        "    B(i) = A(i)",
        "    B(i) max=! B(i) * A(i)",
        "}",
    ], TCSemanticError, 3, 16, ["reduction", "'B'", "may not read"]),
    case("assignment_reads_other_element", [
        HEAD,
        "    B(i) = A(i)",
        "    B(i) = B(i + 1)",
        "}",
    ], TCSemanticError, 3, 12, ["'B'", "other elements"]),
    case("assignment_reads_transposed_element", [
        "def f(float(N, N) A) -> (B) {",
        "    B(i, j) = A(i, j)",
        "    B(i, j) = B(j, i)",
        "}",
    ], TCSemanticError, 3, 15, ["'B'", "other elements"]),
    case("self_read_before_definition", [
        HEAD,
        "    B(i) +=! B(i) + A(r)",
        "}",
    ], TCSemanticError, 2, 14, ["'B'", "before", "defines"]),
    case("read_before_definition", [
        HEAD,
        "    B(i) = C(i)",
        "    C(i) = A(i)",
        "}",
    ], TCSemanticError, 2, 12, ["'C'", "before", "defines"]),
    case("output_never_written", [
        "def f(float(N) A) -> (B, C) {",
        "    B(i) = A(i)",
        "}",
    ], TCSemanticError, 1, 26, ["output", "'C'", "never written"]),
    case("affine_lhs_with_assignment", [
        HEAD,
        "    B(i + 1) = A(i)",
        "}",
    ], TCSemanticError, 2, 7, ["left-hand side", "'='", "index variables"]),
    case("shape_from_gather_subscript", [
        "def f(float(N) A, int32(N) X) -> (B) {",
        "    B(X(i)) +=! A(i)",
        "}",
    ], TCSemanticError, 2, 7, ["shape", "non-affine"]),
    # ----------------------------------------------------------------------- range inference
    case("unsolvable_lhs_index", [
        HEAD,
        "    B(i, j) = A(i)",
        "}",
    ], TCRangeError, 2, 10, ["range", "'j'"]),
    case("unsolvable_non_affine_index", [
        HEAD,
        "    B(i) = A(i * i)",
        "}",
    ], TCRangeError, 2, 14, ["range", "'i'"]),
    case("unconstrained_index_pair", [
        HEAD,
        "    B(i) +=! A(i + j + k)",
        "}",
    ], TCRangeError, 2, 16, ["range", "'i'"]),
    case("unconstrained_constant_subscript", [
        HEAD,
        "    B(i) = A(-1)",
        "}",
    ], TCRangeError, 2, 7, ["range", "'i'"]),
    case("empty_fixed_range", [
        HEAD,
        "    B(i) = A(i) where i in 0:0",
        "}",
    ], TCRangeError, 2, 14, ["empty range", "'i'", "0 <= i < 0"]),
    case("reversed_fixed_range", [
        HEAD,
        "    B(i) = A(i) where i in 3:2",
        "}",
    ], TCRangeError, 2, 14, ["empty range", "'i'", "3 <= i < 2"]),
    case("empty_inferred_range", [
        "def f(float(4) A, float(8) W) -> (B) {",
        "    B(i) +=! A(i + k) * W(k)",
        "}",
    ], TCRangeError, 2, 16, ["empty range", "'i'", "0 <= i < -3"]),
    case("symbolic_empty_fixed_range", [
        HEAD,
        "    B(i) = A(i) where i in N:0",
        "}",
    ], TCRangeError, 2, 14, ["empty range", "'i'"]),
    case("negative_output_subscript", [
        HEAD,
        "    B(i) = A(i + 1)",
        "}",
    ], TCRangeError, 2, 7, ["'B'", "negative", "-1"]),
    case("negative_fixed_range", [
        HEAD,
        "    B(i) = A(i) where i in -2:N",
        "}",
    ], TCRangeError, 2, 7, ["'B'", "negative", "-2"]),
    case("symbolic_negative_output_subscript", [
        "def f(float(N) A, float(K) W) -> (B) {",
        "    B(i) = A(i + K)",
        "}",
    ], TCBoundsError, 2, 7, ["'B'", "negative", "all sizes"]),
    case("write_beyond_declared_output", [
        "def f(float(N) A) -> (float(N) B) {",
        "    B(i) = A(i) where i in 0:N+1",
        "}",
    ], TCRangeError, 2, 7, ["'B'", "beyond", "dimension 0", "N + 1"]),
    case("scatter_beyond_declared_output", [
        "def f(float(N) A) -> (float(N) B) {",
        "    B(i + 1) +=! A(i)",
        "}",
    ], TCRangeError, 2, 7, ["'B'", "beyond", "N + 1"]),
    # ---------------------------------------------------------------------- bounds (isl proof)
    case("read_beyond_input_in_fixed_range", [
        HEAD,
        "    B(i) = A(i) where i in 0:N+1",
        "}",
    ], TCBoundsError, 2, 14, ["'A'", "all sizes", "reaches N"]),
    case("constant_subscript_beyond_input", [
        HEAD,
        "    B(i) = A(i) + A(N)",
        "}",
    ], TCBoundsError, 2, 21, ["'A'", "all sizes", "reaches N"]),
]
# fmt: on


def _raise(source: str) -> TCError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TCWarning)
        with pytest.raises(TCError) as info:
            check_source(source)
    return info.value


def test_the_table_is_large_and_ids_are_unique() -> None:
    ids = [p.id for p in BAD]
    assert len(ids) >= 60
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("source", "cls", "line", "col", "words"), BAD)
def test_bad_program(source: str, cls: type[TCError], line: int, col: int, words: list[str]) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)
            check_source(source)
    except TCError as e:
        err = e
    else:
        pytest.fail(f"accepted; expected {cls.__name__}")
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert (err.line, err.column) == (line, col), str(err)
    for w in words:
        assert w in err.message, f"{w!r} not in {err.message!r}"
    assert err.source == source
    rendered = str(err)
    assert err.message in rendered
    caret_lines = [ln for ln in rendered.splitlines() if re.fullmatch(r"\s*\| *\^~*", ln)]
    assert len(caret_lines) == 1, rendered
    # The caret is under the reported column of the excerpt line above it.
    assert caret_lines[0].index("^") - caret_lines[0].index("|") - 2 == col - 1


# ------------------------------------------------------------------------------ nesting limits
def _nested_parens(depth: int) -> str:
    return text([HEAD, "    B(i) = " + "(" * depth + "A(i)" + ")" * depth, "}"])


def test_parentheses_beyond_max_nesting_are_a_syntax_error() -> None:
    err = _raise(_nested_parens(MAX_NESTING + 1))
    assert type(err) is TCSyntaxError
    assert "nested" in err.message


def test_parentheses_at_max_nesting_are_accepted() -> None:
    check_source(_nested_parens(MAX_NESTING - 2))


def test_nested_calls_beyond_max_nesting_are_a_syntax_error() -> None:
    err = _raise(text([HEAD, "    B(i) = " + "exp(" * (MAX_NESTING + 1) + "A(i)" + ")" * (MAX_NESTING + 1),
                       "}"]))  # fmt: skip
    assert type(err) is TCSyntaxError


def test_parenthesised_chains_are_refused_or_accepted_without_crashing() -> None:
    rhs = "A(i)"
    for _ in range(5):
        rhs = "(" + rhs + ")" + " + A(i)" * (MAX_NESTING - 1)
    source = text([HEAD, "    B(i) = " + rhs, "}"])
    try:
        check_source(source)
    except TCError:
        pass


def test_long_let_chain_does_not_crash() -> None:
    lets = ["x0 = A(i)"] + [f"x{k} = x{k - 1} + 1.0" for k in range(1, 600)]
    source = text([HEAD, "    B(i) = x599 where " + ", ".join(lets), "}"])
    try:
        check_source(source)
    except TCError:
        pass


def test_unsolvable_index_asks_for_a_where_clause() -> None:
    err = _raise(text([HEAD, "    B(i, j) = A(i)", "}"]))
    assert type(err) is TCRangeError
    assert "where j in" in (err.hint or "")
    assert "hint: " in str(err)


# ------------------------------------------------------------------------------------ warnings
def test_accumulation_without_initialisation_warns() -> None:
    source = text([HEAD, "    B(i) += A(i)", "}"])
    with pytest.warns(TCWarning, match=r"'\+=' accumulates into 'B'") as rec:
        check_source(source)
    assert any("+=!" in str(w.message) for w in rec)


@pytest.mark.parametrize("op", ["*=", "min=", "max="])
def test_other_accumulations_without_initialisation_warn(op: str) -> None:
    with pytest.warns(TCWarning, match=re.escape(op)):
        check_source(text([HEAD, f"    B(i) {op} A(i)", "}"]))


@pytest.mark.parametrize(
    "body",
    [
        ["    B(i) +=! A(i)"],
        ["    B(i) = A(i)", "    B(i) += A(i)"],
        ["    B(i) +=! A(i)", "    B(i) max= A(i)"],
    ],
    ids=["initialising", "after_assignment", "after_initialising_reduction"],
)
def test_initialised_accumulations_do_not_warn(body: list[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_source(text([HEAD, *body, "}"]))


# ----------------------------------------------------------------------------------- rendering
def test_rendering_has_position_gutter_caret_and_tildes() -> None:
    source = text([HEAD, "    B(i) = A(i) * C(i)", "}"])
    err = _raise(source)
    assert str(err).splitlines() == [
        "f:2:19: undefined tensor or function 'C'",
        "    2 |     B(i) = A(i) * C(i)",
        "      |                   ^~~~",
    ]


def test_rendering_of_a_syntax_error_names_the_line() -> None:
    err = _raise(text([HEAD, "    B(i) = A(i) @ 2", "}"]))
    assert str(err).splitlines() == [
        "line 2:17: unexpected character '@'",
        "    2 |     B(i) = A(i) @ 2",
        "      |                 ^",
    ]


def test_rendering_of_a_hint() -> None:
    err = _raise(text(["def f(float(N, M) A) -> (B) {", "    B(i) = A(i, r_j)", "}"]))
    lines = str(err).splitlines()
    assert lines[2] == "      |                 ^~~"
    assert lines[3].startswith("hint: ") and "+=!" in lines[3]


def test_rendering_with_a_multi_digit_line_number() -> None:
    body = ["    # comment"] * 10 + ["    B(i) = A(i) * x"]
    err = _raise(text([HEAD, *body, "}"]))
    assert (err.line, err.column) == (12, 19)
    lines = str(err).splitlines()
    assert lines[1] == "   12 |     B(i) = A(i) * x"
    assert lines[2] == "      |                   ^"


def test_rendering_with_tabs_keeps_the_caret_under_the_token() -> None:
    err = _raise("def f(float(N) A) -> (B) {\n\tB(i) =\tA(i) + Q(i)\n}\n")
    assert (err.line, err.column) == (2, 16)
    lines = str(err).splitlines()
    assert lines[1][lines[1].index("|") + 2 :][15:19] == "Q(i)"
    assert lines[2][lines[2].index("|") + 2 :] == " " * 15 + "^~~~"


def test_rendering_of_a_span_across_lines_stops_at_the_line_end() -> None:
    err = _raise(text([HEAD, "    B(i) = A(i) + fmax(A(i),", "                        A(i), 1.0)", "}"]))
    assert type(err) is TCTypeError and (err.line, err.column) == (2, 19)
    caret = str(err).splitlines()[2]
    assert caret.endswith("^" + "~" * (len("fmax(A(i),") - 1))


def test_error_without_source_renders_the_message_only() -> None:
    e = TCCallError("wrong number of inputs: expected 2, got 1")
    assert str(e) == "wrong number of inputs: expected 2, got 1"
    assert e.line is None and e.column is None and e.span is None


def test_error_with_span_and_where() -> None:
    e = TCTypeError("boom", source="abc\ndef\n", span=Span(5, 7, 2, 2), where="k", hint="try this")
    assert str(e).splitlines() == ["k:2:2: boom", "    2 | def", "      |  ^~", "hint: try this"]


def test_span_to() -> None:
    a, b = Span(3, 5, 1, 4), Span(10, 12, 2, 3)
    assert a.to(b) == Span(3, 12, 1, 4)


def test_rendering_at_end_of_input_after_a_newline_shows_the_reported_line() -> None:
    err = _raise(text([HEAD, "    B(i) = A(i)"]))
    assert (err.line, err.column) == (3, 1)
    assert str(err).splitlines()[1].startswith("    3 |")


def test_rendering_with_crlf_line_ends() -> None:
    source = "def f(float(N) A) -> (B) {\r\n    B(i) = A(i)\r\n    C(i) = B(i) + Q(i)\r\n}\r\n"
    err = _raise(source)
    assert (err.line, err.column) == (3, 19)
    assert str(err).splitlines()[2].endswith("^~~~")


def test_rendering_with_a_form_feed_in_the_line() -> None:
    err = _raise("def f(float(N) A) -> (B) {\n  \f  B(i) = A(i) + Q(i)\n}\n")
    assert (err.line, err.column) == (2, 20)
    assert "Q(i)" in str(err).splitlines()[1]


def test_unprintable_character_is_quoted_once() -> None:
    err = _raise(text([HEAD, "    B(i) = A(i) \x1c", "}"]))
    assert type(err) is TCSyntaxError and (err.line, err.column) == (2, 17)
    assert "''" not in err.message


@pytest.mark.parametrize(
    "cls",
    [TCSyntaxError, TCNameError, TCTypeError, TCSemanticError, TCRangeError, TCBoundsError, TCCallError,
     TCInternalError, TCError],
)  # fmt: skip
def test_errors_pickle(cls: type[TCError]) -> None:
    e = cls("message", source="ab\ncd\n", span=Span(3, 5, 2, 1), where="f", hint="h")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is cls
    assert (back.message, back.line, back.column, back.source, back.where, back.hint) == (
        "message",
        2,
        1,
        "ab\ncd\n",
        "f",
        "h",
    )
    assert str(back) == str(e)


def test_checker_errors_pickle() -> None:
    err = _raise(text([HEAD, "    B(i) = A(i) * x", "}"]))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is TCNameError
    assert (back.message, back.line, back.column) == (err.message, 2, 19)
    assert str(back) == str(err)


def test_hierarchy() -> None:
    for cls in (TCSyntaxError, TCNameError, TCTypeError, TCSemanticError, TCRangeError, TCBoundsError,
                TCCallError, TCInternalError):  # fmt: skip
        assert issubclass(cls, TCError) and cls is not TCError
    assert issubclass(TCError, Exception)
    assert issubclass(TCWarning, UserWarning)


def test_non_string_source_is_a_syntax_error() -> None:
    with pytest.raises(TCSyntaxError):
        parse(b"def f() -> () {}")  # type: ignore[arg-type]


# ============================================================================ programs that pass
# The 15 kernels of KERNELS.md (tcjit.suite holds them verbatim; tests/runtime/test_suite.py checks that).
KERNELS = "\n".join(sk.source.strip() + "\n" for sk in SUITE.values())

# Output shapes (as printed) of every kernel.
KERNEL_OUTPUTS = {
    "matmul": {"C": ("M", "N")},
    "tmm": {"C": ("M", "N")},
    "tbmm": {"Z": ("B", "M", "N")},
    "fcrelu": {"O": ("B", "N")},
    "mlp3": {"O1": ("B", "N"), "O2": ("B", "P"), "O3": ("B", "Q")},
    "gconv": {"O": ("N", "G", "F", "H - KH + 1", "W - KW + 1")},
    "conv2d": {"O": ("N", "F", "H - KH + 1", "W - KW + 1")},
    "kronecker3": {
        "XW2": ("M", "N0", "N1", "D2"),
        "XW1": ("M", "N0", "D1", "D2"),
        "Y": ("M", "D0", "D1", "D2"),
    },
    "tensordot": {"O": ("N", "C0", "C1", "C3")},
    "softmax": {"O": ("N", "D"), "mx": ("N",), "sm": ("N",)},
    "layernorm": {"O": ("N", "D"), "mean": ("N",), "var": ("N",)},
    "bn_reduce": {"mean": ("C",)},
    "cosine": {"O": ("M",), "nA": ("M",), "nB": ("M",), "dot": ("M",)},
    "maxpool2x2": {"O": ("N", "C", "H / 2", "W / 2")},
    "abs_sum": {"S": ()},
}


def _kernels() -> dict[str, str]:
    chunks = re.split(r"(?m)^(?=def )", KERNELS)
    return {re.match(r"def (\w+)", c).group(1): c for c in chunks if c.strip()}


def _check(source: str):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no TCWarning either
        return check_source(source)


def _shape(d, name: str) -> tuple[str, ...]:
    return tuple(str(s) for s in d.tensor(name).shape)


def test_all_kernels_in_one_source() -> None:
    p = _check(KERNELS)
    assert p.names == tuple(KERNEL_OUTPUTS)
    assert len(p.names) == 15


@pytest.mark.parametrize("name", list(KERNEL_OUTPUTS))
def test_kernel_shapes(name: str) -> None:
    d = _check(_kernels()[name]).get(name)
    assert d is not None and d.outputs == tuple(KERNEL_OUTPUTS[name])
    assert d.temporaries == ()
    for out, shape in KERNEL_OUTPUTS[name].items():
        assert _shape(d, out) == shape
        assert d.tensor(out).role == "output"
        assert d.tensor(out).dtype.name == "float32"
    for p in d.params:
        assert d.tensor(p).role == "input" and d.tensor(p).declared


def test_matmul_statement() -> None:
    d = _check(_kernels()["matmul"]).get("matmul")
    (s,) = d.statements
    assert (s.tensor, s.op, s.init, s.lhs_vars, s.reduction_vars) == ("C", "+=", True, ("m", "n"), ("r_k",))
    assert [str(r) for r in s.ranges] == ["0 <= m < M", "0 <= n < N", "0 <= r_k < K"]
    assert d.sizes == ("M", "K", "N")
    assert d.signature() == "matmul(float32(M, K) A, float32(K, N) B) -> (float32(M, N) C)"


def test_gconv_ranges() -> None:
    d = _check(_kernels()["gconv"]).get("gconv")
    (s,) = d.statements
    assert str(s.range_of("h")) == "0 <= h < H - KH + 1"
    assert str(s.range_of("r_kw")) == "0 <= r_kw < KW"
    assert s.reduction_vars == ("r_c", "r_kh", "r_kw")


def test_maxpool_ranges() -> None:
    d = _check(_kernels()["maxpool2x2"]).get("maxpool2x2")
    (s,) = d.statements
    assert str(s.range_of("h")) == "0 <= h < H / 2"
    assert str(s.range_of("r_kh")) == "0 <= r_kh < 2"
    assert s.op == "max=" and s.init


@pytest.mark.parametrize(
    ("name", "temps"),
    [("mlp3", ("O1", "O2")), ("softmax", ("mx", "sm")), ("layernorm", ("mean", "var")),
     ("cosine", ("nA", "nB", "dot")), ("kronecker3", ("XW2", "XW1"))],
)  # fmt: skip
def test_kernels_with_temporaries_left_out(name: str, temps: tuple[str, ...]) -> None:
    source = _kernels()[name]
    header, rest = source.split("{", 1)
    outs = re.search(r"->\s*\(([^)]*)\)", header).group(1)
    kept = ", ".join(o.strip() for o in outs.split(",") if o.strip() not in temps)
    source = header.replace(f"({outs})", f"({kept})") + "{" + rest
    d = _check(source).get(name)
    assert d.temporaries == temps
    assert set(d.outputs) == set(KERNEL_OUTPUTS[name]) - set(temps)
    for t in temps:
        assert d.tensor(t).role == "temporary"
        assert _shape(d, t) == KERNEL_OUTPUTS[name][t]


def _one(lines: list[str]):
    p = _check(text(lines))
    assert len(p.defs) == 1
    return p.defs[0]


def test_strided_subscript_halves_the_range() -> None:
    d = _one(["def down(float(I) B) -> (A) {", "    A(i) = B(2*i)", "}"])
    assert str(d.statements[0].range_of("i")) == "0 <= i < (I + 1) / 2"
    assert _shape(d, "A") == ("(I + 1) / 2",)


def test_valid_convolution_range() -> None:
    d = _one(["def conv1d(float(I) B, float(K) W) -> (A) {", "    A(i) +=! B(i + k) * W(k)", "}"])
    s = d.statements[0]
    assert str(s.range_of("k")) == "0 <= k < K"
    assert str(s.range_of("i")) == "0 <= i < I - K + 1"
    assert _shape(d, "A") == ("I - K + 1",)


def test_where_range_fixes_a_range() -> None:
    d = _one(["def fill(float(N) A) -> (B) {", "    B(i) = 2.0 where i in 0:N + 3", "}"])
    assert _shape(d, "B") == ("N + 3",)
    d = _one(["def fill(float(N) A) -> (B) {", "    B(i) = A(i) where i in 0:N", "}"])
    assert _shape(d, "B") == ("N",)
    d = _one(["def part(float(N) A) -> (B) {", "    B(i) = A(i) where i in 0:4", "}"])
    assert _shape(d, "B") == ("4",)


def test_strided_convolution() -> None:
    d = _one(["def sconv(float(H) I, float(KH) W) -> (O) {", "    O(h) +=! I(2*h + r_kh) * W(r_kh)", "}"])
    hi = d.statements[0].range_of("h").hi
    assert hi == (sym("H") - sym("KH")).floordiv(2) + 1
    for h in range(1, 12):
        for kh in range(1, h + 1):
            assert hi.evaluate({"H": h, "KH": kh}) == (h - kh) // 2 + 1


def test_exists_clause_feeds_range_inference() -> None:
    d = _one(["def ex(float(N) A) -> (B) {", "    B(i) = 1.0 where exists A(i)", "}"])
    assert _shape(d, "B") == ("N",)
    assert str(d.statements[0].range_of("i")) == "0 <= i < N"


def test_let_binding_is_substituted() -> None:
    from tcjit.polyhedral.lang import ast as A

    d = _one(["def let(float(N) A) -> (B) {", "    B(i) = x * x where x = A(i) + 1.0", "}"])
    s = d.statements[0]
    assert not any(isinstance(n, A.Ident) and n.name == "x" for n in A.walk(s.rhs))
    assert sum(isinstance(n, A.Access) for n in A.walk(s.rhs)) == 2
    assert _shape(d, "B") == ("N",)


def test_dimension_size_in_a_range() -> None:
    d = _one(["def dim(float(N, M) A) -> (B) {", "    B(i) = 2.0 where i in 0:A.1", "}"])
    assert _shape(d, "B") == ("M",)


def test_dimension_size_in_a_value() -> None:
    d = _one(["def dim(float(N, M) A) -> (B) {", "    B(i) = A(i, 0) / float(A.1)", "}"])
    assert _shape(d, "B") == ("N",)


@pytest.mark.parametrize("lhs", ["S", "S()"])
def test_rank_zero_output(lhs: str) -> None:
    d = _one(["def total(float(N, M) A) -> (S) {", f"    {lhs} +=! A(r_i, r_j)", "}"])
    assert d.tensor("S").shape == () and d.tensor("S").rank == 0
    assert d.statements[0].lhs_vars == () and d.statements[0].reduction_vars == ("r_i", "r_j")


def test_rank_zero_output_read_back() -> None:
    d = _one(["def mean(float(N) A) -> (S) {", "    S +=! A(r_i)", "    S = S / float(N)", "}"])
    assert len(d.statements) == 2 and d.tensor("S").rank == 0


def test_temporary() -> None:
    d = _one([
        "def temp(float(N) A) -> (B) {",
        "    T(i) = A(i) * 2.0",
        "    U(i) = T(i) + 1.0",
        "    B(i) = U(i) + T(i)",
        "}",
    ])  # fmt: skip
    assert d.temporaries == ("T", "U")
    assert d.outputs == ("B",)
    assert d.tensor("T").role == "temporary" and _shape(d, "T") == ("N",)


def test_typed_output_with_explicit_sizes() -> None:
    d = _one(["def typed(float(N, M) A) -> (double(N, M) B) {", "    B(i, j) = A(i, j)", "}"])
    t = d.tensor("B")
    assert t.declared and t.dtype.name == "float64" and _shape(d, "B") == ("N", "M")


def test_typed_output_written_in_part() -> None:
    d = _one(["def part(float(N) A) -> (float(N) B) {", "    B(i) +=! A(i) where i in 0:N - 1", "}"])
    assert _shape(d, "B") == ("N",)
    assert str(d.statements[0].range_of("i")) == "0 <= i < N - 1"


def test_typed_output_without_sizes() -> None:
    d = _one(["def cnt(float(N) A) -> (int32 C) {", "    C(i) = i < 3 ? 1 : 0 where i in 0:N", "}"])
    assert d.tensor("C").dtype.name == "int32" and _shape(d, "C") == ("N",)


def test_affine_lhs_accumulation_with_domain_conditions() -> None:
    source = text([
        "def grad(float(N,C,H) I, float(N,C,HO) d_O, float(KH) W) -> (float(N,C,H) d_I) {",
        "    d_I(n, c, h + r_kh) += d_O(n, c, h) * W(r_kh) where h - r_kh >= 0, h + r_kh < H",
        "}",
    ])  # fmt: skip
    with pytest.warns(TCWarning):  # '+=' as first definition
        d = check_source(source).get("grad")
    s = d.statements[0]
    assert not s.plain_lhs
    assert len(s.conditions) == 2
    assert [str(r) for r in s.ranges] == ["0 <= n < N", "0 <= c < C", "0 <= h < HO", "0 <= r_kh < KH"]
    assert _shape(d, "d_I") == ("N", "C", "H")


def test_strided_scatter_gives_the_shape() -> None:
    d = _one(["def up(float(N) A, float(K) W) -> (B) {", "    B(2 * i + k) +=! A(i) * W(k)", "}"])
    assert d.tensor("B").shape[0] == 2 * sym("N") + sym("K") - 2


def test_scalar_argument_and_types() -> None:
    d = _one(["def axpy(float(N) X, float(N) Y, double a) -> (Z) {", "    Z(i) = a * X(i) + Y(i)", "}"])
    assert d.scalars["a"].dtype.name == "float64"
    assert d.tensor("Z").dtype.name == "float64"


def test_small_integer_types_do_not_promote() -> None:
    d = _one(["def inc(int8(N) A) -> (B) {", "    B(i) = A(i) + 1", "}"])
    assert d.tensor("B").dtype.name == "int8"


def test_comparison_gives_bool() -> None:
    d = _one(["def pos(float(N) A) -> (B) {", "    B(i) = A(i) > 0.0", "}"])
    assert d.tensor("B").dtype.name == "bool"


def test_most_negative_literal_fits() -> None:
    d = _one(["def lo(float(N) A) -> (int8(N) B) {", "    B(i) = -128 where i in 0:N", "}"])
    assert d.tensor("B").dtype.name == "int8"


def test_gather_with_integer_tensor() -> None:
    d = _one([
        "def emb(int32(B, L) X, float(V, D) T) -> (O) {",
        "    O(b, l, d) = T(X(b, l), d)",
        "}",
    ])  # fmt: skip
    assert _shape(d, "O") == ("B", "L", "D")


def test_comments_blank_lines_and_several_defs() -> None:
    source = text([
        "# two entry points",
        "",
        "def one(float(N) A) -> (B) {  # first",
        "    B(i) = A(i) # copy",
        "}",
        "",
        "def two(float(N) A) -> (B) {",
        "    B(i) = A(i) * 2.0",
        "}",
    ])  # fmt: skip
    p = _check(source)
    assert p.names == ("one", "two")
    assert p.get("two").statements[0].source.span.line == 8


def test_empty_source_has_no_definitions() -> None:
    assert _check("").defs == ()
    assert _check("  # nothing\n\n").defs == ()


def test_constant_sizes() -> None:
    d = _one(["def c(float(3, N) A) -> (B) {", "    B(i, j) = A(i, j)", "}"])
    assert d.tensor("B").shape == (const(3), sym("N"))


def test_a_scatter_below_zero_is_refused_when_the_sizes_make_it_one() -> None:
    """``B(-i)`` is fine for N = 1 and writes B(-1) for N = 2: refused when the call binds N."""
    import torch

    import tcjit

    k = tcjit.define(text([HEAD, "    B(-i) +=! A(i)", "}"]))
    torch.testing.assert_close(k(torch.full((1,), 3.0)), torch.full((1,), 3.0))
    with pytest.raises(tcjit.TCBoundsError) as e:
        k(torch.ones(3))
    assert (e.value.line, e.value.column) == (2, 7) and "N=3" in e.value.message
