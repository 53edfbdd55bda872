"""User Markdown -> safe HTML, once, on write: markdown-it-py (CommonMark, raw HTML off) then nh3 (Ammonia).

Two walls: markdown-it escapes every `<` a user types and refuses `javascript:` links; nh3 then keeps only the
tags and attributes listed here, so a parser bug cannot smuggle markup through. Extras, rendered as text:
`$x^2$` and `$$…$$` / ```math blocks keep their TeX inside `.math` elements (no math engine, no CDN); fenced
code keeps its language in `data-lang`. References become links when they resolve: `#a123` (annotation 123)
and `!anomaly-45` (anomaly 45 of the anomaly log).
"""

from __future__ import annotations

import re
from html import escape

import nh3
from markdown_it import MarkdownIt
from markdown_it.rules_block.fence import make_fence_rule

ANNOTATION_REF = re.compile(r"#a(\d{1,12})(?![\w-])")
ANOMALY_REF = re.compile(r"!anomaly-(\d{1,12})(?![\w-])")
_LANG = re.compile(r"^[\w+#.-]{1,30}$")
# Trojan-source characters: bidi overrides and isolates reorder what a reader sees; nothing legitimate needs them.
_INVISIBLE = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_CONTROL = dict.fromkeys(c for c in range(32) if chr(c) not in "\n\t")

ALLOWED_TAGS = {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "s", "del", "code", "pre",
                "blockquote", "ul", "ol", "li", "a", "span", "div", "table", "thead", "tbody", "tr", "th", "td"}
ALLOWED_ATTRIBUTES = {"a": {"href", "title", "data-annotation", "data-anomaly"}, "ol": {"start"},
                      "code": {"data-lang"}}
ALLOWED_CLASSES = {"a": {"ref", "ref-annotation", "ref-anomaly"}, "span": {"math"}, "div": {"math-block"}}
LINK_REL = "nofollow ugc noopener"
URL_SCHEMES = {"http", "https", "mailto"}


def clean_text(text: str) -> str:
    """Control characters (but newlines and tabs) and bidi overrides removed; CRLF normalised."""
    return text.replace("\r\n", "\n").replace("\r", "\n").translate(_CONTROL).translate(_INVISIBLE)


def references(text: str) -> tuple[set[int], set[int]]:
    """The annotation and anomaly ids a text mentions (a superset: code spans are not excluded)."""
    return ({int(m) for m in ANNOTATION_REF.findall(text)}, {int(m) for m in ANOMALY_REF.findall(text)})


# ---------------------------------------------------------------------------------------------- inline rules
def _math_inline(state, silent: bool) -> bool:
    """`$…$` (pandoc's rule: no space inside either dollar, no digit right after the closing one) and `$$…$$`."""
    src, start = state.src, state.pos
    if src[start] != "$":
        return False
    display = src.startswith("$$", start)
    opener = 2 if display else 1
    pos = start + opener
    if pos >= state.posMax or src[pos].isspace():
        return False
    end = pos
    while True:
        end = src.find("$$" if display else "$", end)
        if end == -1 or end >= state.posMax:
            return False
        if src[end - 1] == "\\":
            end += 1
            continue
        break
    if end == pos or src[end - 1].isspace():
        return False
    close = end + opener
    if not display and close < state.posMax and src[close].isdigit():
        return False  # "$5 and $6": prices, not math
    if not silent:
        token = state.push("math_inline", "span", 0)
        token.content, token.markup = src[pos:end], "$$" if display else "$"
    state.pos = close
    return True


def _reference(state, silent: bool) -> bool:
    """`#a123` / `!anomaly-45` -> a link when env["refs"] resolves it, else plain text."""
    src, start = state.src, state.pos
    if src[start] not in "#!" or state.linkLevel > 0:
        return False
    if start > 0 and (src[start - 1].isalnum() or src[start - 1] in "_/&"):
        return False  # inside a word, a path or an entity
    kind, regex = ("annotation", ANNOTATION_REF) if src[start] == "#" else ("anomaly", ANOMALY_REF)
    m = regex.match(src, start, state.posMax)
    if not m:
        return False
    url = state.env.get("refs", {}).get(kind, {}).get(int(m.group(1)))
    if url is None:
        return False
    if not silent:
        tok = state.push("link_open", "a", 1)
        tok.attrs = {"href": url, "class": f"ref ref-{kind}", f"data-{kind}": m.group(1)}
        state.push("text", "", 0).content = m.group(0)
        state.push("link_close", "a", -1)
    state.pos = m.end()
    return True


# ---------------------------------------------------------------------------------------------- renderers
def _render_math_inline(self, tokens, idx, options, env):
    t = tokens[idx]
    return f'<span class="math">{escape(t.markup + t.content + t.markup)}</span>'


def _render_math_block(self, tokens, idx, options, env):
    return f'<div class="math-block">{escape(tokens[idx].content.rstrip())}</div>\n'


def _render_fence(self, tokens, idx, options, env):
    t = tokens[idx]
    lang = t.info.strip().split(maxsplit=1)[0] if t.info.strip() else ""
    if lang == "math":
        return _render_math_block(self, tokens, idx, options, env)
    attr = f' data-lang="{escape(lang)}"' if _LANG.match(lang) else ""
    return f"<pre><code{attr}>{escape(t.content)}</code></pre>\n"


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "maxNesting": 20})
    md.enable(["table", "strikethrough"])
    md.disable("image")  # no images: remote ones track readers (and CSP would block them anyway)
    md.block.ruler.before("fence", "math_block",
                          make_fence_rule(markers=("$",), token_type="math_block", min_markers=2,
                                          disallow_marker_in_info=("$",)),
                          {"alt": ["paragraph", "reference", "blockquote", "list"]})
    md.inline.ruler.after("escape", "math_inline", _math_inline)
    md.inline.ruler.after("math_inline", "reference", _reference)
    md.add_render_rule("math_inline", _render_math_inline)
    md.add_render_rule("math_block", _render_math_block)
    md.add_render_rule("fence", _render_fence)
    return md


_MD = _parser()


def sanitize(html: str) -> str:
    return nh3.clean(html, tags=ALLOWED_TAGS, attributes=ALLOWED_ATTRIBUTES, allowed_classes=ALLOWED_CLASSES,
                     link_rel=LINK_REL, url_schemes=URL_SCHEMES, strip_comments=True)


def render(text: str, refs: dict | None = None) -> str:
    """Markdown -> sanitised HTML. refs: {"annotation": {id: url}, "anomaly": {id: url}} for the references."""
    return sanitize(_MD.render(clean_text(text), {"refs": refs or {}}))
