"""Documents the crawler and document-extraction tests serve: an article page and hand-built PDFs."""

from __future__ import annotations

ARTICLE_SENTENCE = "Hydrothermal vents support entire ecosystems without sunlight"
ARTICLE_HTML = f"""<!doctype html>
<html><head><title>Life at the Vents</title></head>
<body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/shop">NAVBOILERPLATE Shop</a></li>
<li><a href="/about">About us</a></li></ul></nav>
<header><div class="banner">SITEHEADER Subscribe now!</div></header>
<main><article>
<h1>Life at the Vents</h1>
<p>{ARTICLE_SENTENCE}. Chemosynthetic bacteria turn hydrogen sulphide into energy, and tube
worms, clams and shrimp live off them in water hotter than 300 degrees Celsius.</p>
<p>The first vents were found in 1977 near the Galapagos Islands by the submersible Alvin. Since
then, hundreds of vent fields have been mapped along mid-ocean ridges around the world, and
each one hosts species that live nowhere else.</p>
<p>Researchers study the vents to understand how life may have begun on Earth, and whether
similar chemistry could support life in the oceans of Europa or Enceladus. See the
<a href="https://example.org/vents">survey of vent fields</a> for details.</p>
</article></main>
<footer>FOOTERBOILERPLATE Copyright 2024. All rights reserved. Privacy. Terms.</footer>
</body></html>"""


def _pdf(objects: list[bytes], trailer: bytes = b"") -> bytes:
    """A PDF of ``objects`` (numbered from 1, the first one the catalogue), offsets computed by hand."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer, xref)
    return bytes(out)


def make_pdf(text: str, title: str) -> bytes:
    """A minimal valid one-page PDF with ``text`` in Helvetica and ``title`` in its document info."""
    content = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    return _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Title ({title}) >>".encode("latin-1"),
    ], trailer=b" /Info 6 0 R")


def make_slow_pdf(pages: int, operators: int) -> bytes:
    """``pages`` pages that all share one content stream of ``operators`` text operators.

    Small (~1 MB) but slow: pypdf interprets the shared stream again for every page, ~9 s each.
    """
    stream = b"BT /F1 1 Tf\n" + b"0 0 Td () Tj\n" * (operators // 2) + b"ET"
    kids = b" ".join(b"%d 0 R" % (5 + page) for page in range(pages))
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
    page += b"/Resources << /Font << /F1 4 0 R >> >> >>"
    return _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *[page] * pages,
    ])
