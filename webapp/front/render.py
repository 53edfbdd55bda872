"""A loss curve as a PNG for link previews (Open Graph, 1200x630), drawn with Pillow: no browser, no plotting stack.

Input is a window as webapp.metrics.queries answers it (each bucket's min and max at their true steps), so a spike
drawn here is one the dashboard shows too. `highlight` shades a step range (an annotation's).
"""

from __future__ import annotations

import io
import math

from PIL import Image, ImageDraw, ImageFont

W, H = 1200, 630  # Open Graph's recommended size (1.91:1); Twitter's summary_large_image crops the same
PAD_L, PAD_R, PAD_T, PAD_B = 96, 48, 150, 70
BG, FG, MUTED, GRID = (255, 255, 255), (20, 24, 31), (96, 104, 116), (228, 231, 236)
LINE, SHADE, SHADE_EDGE = (25, 103, 210), (255, 213, 79, 110), (230, 160, 0)


def _font(size: int):
    return ImageFont.load_default(size=size)  # Pillow's bundled font (FreeType): no host font path involved


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _fit(draw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def png(title: str, subtitle: str, steps: list[int], values: list, highlight: tuple[int, int] | None = None) -> bytes:
    """The image's bytes. `values` may hold None (non-finite points: left out of the line)."""
    img = Image.new("RGB", (W, H), BG)
    draw = ImageDraw.Draw(img, "RGBA")
    draw.text((PAD_L, 36), _fit(draw, title, _font(46), W - PAD_L - PAD_R), fill=FG, font=_font(46))
    draw.text((PAD_L, 94), _fit(draw, subtitle, _font(26), W - PAD_L - PAD_R), fill=MUTED, font=_font(26))
    x0, x1, y0, y1 = PAD_L, W - PAD_R, PAD_T, H - PAD_B
    pts = [(s, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    small = _font(20)
    if not pts:
        draw.text((x0, (y0 + y1) // 2), "no loss points yet", fill=MUTED, font=_font(30))
        return _encode(img)
    lo_s = min(s for s, _ in pts)
    hi_s = max(s for s, _ in pts)
    if highlight:
        lo_s, hi_s = min(lo_s, highlight[0]), max(hi_s, highlight[1])
    lo_v, hi_v = min(v for _, v in pts), max(v for _, v in pts)
    if hi_v == lo_v:
        lo_v, hi_v = lo_v - 0.5, hi_v + 0.5
    span_s = max(1, hi_s - lo_s)

    def X(s):
        return x0 + (s - lo_s) * (x1 - x0) / span_s

    def Y(v):
        return y1 - (v - lo_v) * (y1 - y0) / (hi_v - lo_v)

    for i in range(5):  # grid and value labels
        v = lo_v + (hi_v - lo_v) * i / 4
        draw.line([(x0, Y(v)), (x1, Y(v))], fill=GRID, width=1)
        draw.text((x0 - 10, Y(v)), _fmt(v), fill=MUTED, font=small, anchor="rm")
    for s in (lo_s, hi_s):
        draw.text((X(s), y1 + 14), f"step {s:,}", fill=MUTED, font=small, anchor="ma" if s == lo_s else "ra")
    if highlight:
        a, b = X(highlight[0]), X(highlight[1])
        if b - a < 4:  # a one-step note: a visible bar
            a, b = a - 2, b + 2
        draw.rectangle([a, y0 - 8, b, y1], fill=SHADE, outline=SHADE_EDGE, width=2)
    draw.line([(X(s), Y(v)) for s, v in pts], fill=LINE, width=3, joint="curve")
    return _encode(img)


def _encode(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=False, compress_level=6)
    return buf.getvalue()
