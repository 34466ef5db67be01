"""How a run's documents are named to people and to the model: by the file's name, never by where
the file lies on the server.

Why (issue #49 §1): an uploaded document's path (``/…/.deerflow/resources/uploads/<token>/x.md``)
went into DeerFlow's settings list, the researcher's task (so into plan and step titles the model
wrote) and the report's citations. The server's layout is none of the reader's business, and the
model needs no path: ``local_search_tool`` searches the run's resources whatever its arguments.

Pure and linear, so the workflow, the worker and the front doors share it.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

# A document under the operator's resource roots, named by its path below its root: what the API
# server lists, so DeerFlow's UI and our page never hold a server path (config/resources.py reads it).
LOCAL_SCHEME = "local://"
# A passage of a local document as a search result's address: the file's name and the chunk.
DOCUMENT_SCHEME = "document://"
_PATH_SCHEMES = ("file://", LOCAL_SCHEME)


def local_uri(relative: str) -> str:
    """The ``local://`` URI of the document at ``relative`` (a POSIX path below a resource root)."""
    return LOCAL_SCHEME + quote(relative, safe="/")


def document_name(resource: str) -> str:
    """The name a person knows a resource by: a file's or folder's name, a RAG URI as it is."""
    text = resource.strip()
    lowered = text.lower()
    scheme = next((scheme for scheme in _PATH_SCHEMES if lowered.startswith(scheme)), None)
    if scheme is None and "://" in text:
        return text  # rag://dataset/…: the provider's own name, no server path in it
    if scheme is not None:
        text = unquote(text[len(scheme):].split("#", 1)[0])
    return text.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or resource


def passage_address(file_name: str, chunk: int) -> str:
    """A local passage's citable address: the file's name and its chunk, no folder."""
    return f"{DOCUMENT_SCHEME}{quote(file_name, safe='')}#chunk-{chunk}"
