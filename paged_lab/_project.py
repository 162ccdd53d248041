"""Project facts set in one place: the repository URL that every badge points at."""

REPO_SLUG = "paged-lab/paged-lab"
REPO_URL = f"https://github.com/{REPO_SLUG}"
BRANCH = "main"


def binder_url(notebook: str | None = None) -> str:
    url = f"https://mybinder.org/v2/gh/{REPO_SLUG}/{BRANCH}"
    return f"{url}?labpath=notebooks%2F{notebook}" if notebook else url


def colab_url(notebook: str) -> str:
    return f"https://colab.research.google.com/github/{REPO_SLUG}/blob/{BRANCH}/notebooks/{notebook}"


LEAD = "Run it online:"  # the words before the links (the zh-TW twins pass their own)


def badges_markdown(notebook: str, lead: str = LEAD) -> str:
    """The line that opens ``notebook`` on Binder and on Colab (tests check it): plain text links, not
    badge images, so that a learner who runs the notebook offline reads two links instead of two
    broken images."""
    space = "" if lead.endswith("：") else " "  # a full-width colon takes no space after it
    return f"{lead}{space}[Binder]({binder_url(notebook)}) · [Colab]({colab_url(notebook)})"
