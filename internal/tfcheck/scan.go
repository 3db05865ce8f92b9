package tfcheck

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// nativeNesting bounds, before hclsyntax parses src, how deep its recursive-descent parser can
// go. It reads the tokens of hclsyntax's own scanner (a state machine, not recursive), so it sees
// exactly the brackets the parser will see, and counts as nesting:
//   - brackets, braces and parentheses, quoted strings, heredocs and template sequences (${ and %{);
//   - the if and for directives of templates, which the template parser nests without brackets;
//   - runs of unary operators (!!!!x), each of which the parser nests in the next.
//
// It also bounds the conditional operators and full splats of the file: the parser nests
// a ? b : c ? d : ... one level per operator, and x[*][*]... one level per splat; and the parts of
// each string, heredoc and template (maxTemplateParts), which the parser melds in quadratic time.
// It returns the position of the first offending token, and false, when src would nest deeper than
// MaxDepth or exceed those bounds.
func nativeNesting(src []byte, template bool, start hcl.Pos) (hcl.Pos, string, bool) {
	if off, ok := rawBrackets(src); !ok {
		return hcl.Pos{Line: start.Line, Column: start.Column, Byte: start.Byte + off}, "nested more than 64 deep (brackets, braces, strings, templates or operators)", false
	}
	var toks hclsyntax.Tokens
	if template {
		toks, _ = hclsyntax.LexTemplate(src, "", start)
	} else {
		toks, _ = hclsyntax.LexConfig(src, "", start)
	}
	depth, directives, unary, chained := 0, 0, 0, 0
	afterControl := false
	prev := hclsyntax.TokenNil
	// parts counts the parts of each open template (a quoted string, a heredoc, or src itself in
	// template mode): its literal pieces (each heredoc line, each $${ or %%{ escape) and its ${ and %{
	// sequences. The parser melds consecutive literal pieces by deleting one slice element at a time,
	// so one template costs it the square of its parts.
	var parts []int
	if template {
		parts = append(parts, 0)
	}
	for _, t := range toks {
		switch t.Type {
		case hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
			parts = append(parts, 0)
		case hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		case hclsyntax.TokenStringLit, hclsyntax.TokenQuotedLit, hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			if len(parts) > 0 {
				parts[len(parts)-1]++
				if parts[len(parts)-1] > maxTemplateParts {
					return t.Range.Start, "a string or heredoc of more than 20000 parts (lines, escapes, ${ and %{ sequences): the parser's work grows with the square of that", false
				}
			}
		}
		switch t.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen,
			hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			depth++
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen,
			hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc, hclsyntax.TokenTemplateSeqEnd:
			if depth > 0 {
				depth--
			}
		case hclsyntax.TokenQuestion, hclsyntax.TokenStar:
			if t.Type == hclsyntax.TokenStar && prev != hclsyntax.TokenOBrack {
				break
			}
			chained++
			if chained > maxChained {
				return t.Range.Start, "more than 4096 conditional operators and splats in one file", false
			}
		}
		if t.Type == hclsyntax.TokenNewline || t.Type == hclsyntax.TokenComment {
			continue
		}
		prev = t.Type
		if afterControl && t.Type == hclsyntax.TokenIdent {
			// The keyword of a template directive: %{ if ...}, %{ for ...} open a level that
			// %{ endif } and %{ endfor } close. Unmatched closers cannot lower the count below
			// zero, so they cannot hide openers.
			switch string(t.Bytes) {
			case "if", "for":
				directives++
			case "endif", "endfor":
				if directives > 0 {
					directives--
				}
			}
		}
		afterControl = t.Type == hclsyntax.TokenTemplateControl
		if t.Type == hclsyntax.TokenBang || t.Type == hclsyntax.TokenMinus {
			unary++
		} else {
			unary = 0
		}
		if depth+directives+unary > MaxDepth {
			return t.Range.Start, "nested more than 64 deep (brackets, braces, strings, templates or operators)", false
		}
	}
	return hcl.Pos{}, "", true
}

// rawBrackets refuses at once, before the lexer turns a megabyte of "[[[[" into a million tokens,
// input whose brackets, braces and parentheses alone nest deeper than MaxDepth. It does not know
// strings and comments, so an opener inside a string counts too: it may refuse a file whose
// strings hold more than 64 unclosed brackets, and it never decides that anything is harmless (the
// token scan that follows does).
func rawBrackets(src []byte) (int, bool) {
	depth := 0
	for i, b := range src {
		switch b {
		case '{', '[', '(':
			depth++
			if depth > MaxDepth {
				return i, false
			}
		case '}', ']', ')':
			if depth > 0 {
				depth--
			}
		}
	}
	return 0, true
}
