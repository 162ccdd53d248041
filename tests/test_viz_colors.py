"""viz.colors: a request's colour follows from its id, so every figure of a notebook draws it alike."""

from paged_lab.viz.colors import PALETTE, contrast, ink_for, natural_index, seq_colors, seq_name


def test_letters_and_numbers_name_their_colour():
    assert [natural_index(s) for s in ("A", "B", "F", "r2", "sample-2", 2, "2_req", "0.1", "first", "p")] == \
        [0, 1, 5, 2, 2, 2, 2, 1, None, None]
    assert seq_colors(["A"])["A"] == seq_colors(["early-7", "early-0", "A"])["A"] == PALETTE[0]
    assert seq_colors(["r12", "r2"]) == {"r12": PALETTE[2], "r2": PALETTE[2]}  # ten colours go round


def test_other_ids_take_the_colours_left_free():
    assert seq_colors(["p", "A", "c"]) == {"p": PALETTE[1], "A": PALETTE[0], "c": PALETTE[2]}
    assert seq_colors(["first", "again"]) == {"first": PALETTE[0], "again": PALETTE[1]}


def test_bare_numbers_are_named_as_requests():
    assert [seq_name(s) for s in (4, "4", "0.1", "r4", "A")] == ["request 4", "request 4", "request 0.1",
                                                                 "r4", "A"]


def test_ink_reads_on_its_fill():
    assert ink_for(PALETTE[0]) == "#ffffff" and ink_for("#525252") == "#ffffff"
    assert (ink_for("#c7c7c7") == "#222222" and ink_for("#bcbd22") == "#222222"
            and ink_for("white") == "#222222")
    # white on orange reads at 2.5:1; the darker ink at 6.5:1
    assert ink_for(PALETTE[1]) == "#222222" and all(contrast(ink_for(c), c) >= 3
                                                    for c in PALETTE + ("#525252",))
