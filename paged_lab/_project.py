"""Project facts set in one place: the repository URL that every badge points at."""

REPO_SLUG = "paged-lab/paged-lab"
REPO_URL = f"https://github.com/{REPO_SLUG}"
BRANCH = "main"


def binder_url(notebook: str | None = None) -> str:
    url = f"https://mybinder.org/v2/gh/{REPO_SLUG}/{BRANCH}"
    return f"{url}?labpath=notebooks%2F{notebook}" if notebook else url


def colab_url(notebook: str) -> str:
    return f"https://colab.research.google.com/github/{REPO_SLUG}/blob/{BRANCH}/notebooks/{notebook}"


def badges_markdown(notebook: str) -> str:
    """The Binder and Colab badge line that opens every notebook (tests check it)."""
    return (
        f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder_url(notebook)}) "
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook)})"
    )
