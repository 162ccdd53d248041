"""The quiz of notebook 02 · Contiguous vs paged: the lockers. The numbers are the notebook's runs;
the number question's answer comes from ``ContiguousAllocator`` itself."""

from __future__ import annotations

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz
from paged_lab.memory import BlockManager, ContiguousAllocator


def quiz(*, old_in: int, new_in: int, lockers: int, reserve: int, held: int, empty: int, handed_out: int,
         bags_f: int, total_luggage: int, seed_bags: tuple[int, int], waste: dict[int, float],
         peak: dict[str, int], chat_slots: int, chat_reserve: int) -> Quiz:
    """``waste``: the share of handed-out slots left empty per block size (two sizes, small and big);
    ``peak``: the most requests running at once, ``"contiguous"`` and ``"paged"``."""
    bags, single = seed_bags
    # the old manager: 12 in a row each
    old = ContiguousAllocator(num_slots=lockers, max_seq_len=reserve)
    ahye = BlockManager(num_blocks=lockers, block_size=1)                    # Ah-Ye: one locker per page
    for name, n in (("first", bags), ("second", single)):
        old.allocate(name, [0] * n)
        ahye.allocate(name, [0] * n)
    empty_each = {name: old.reservation(name) - old.num_tokens(name) for name in ("first", "second")}
    ahye_empty = sum(len(ahye.block_table(name)) for name in ("first", "second")) - bags - single
    small, big = sorted(waste)

    return Quiz([
        Question(
            f"In round 1 the old manager has let in {old_in} travellers and F waits outside, yet only {held} "
            f"of the {lockers} lockers hold luggage: {empty} are empty. Why must F wait?",
            [Choice(f"F's {bags_f} pieces of luggage need more lockers than are empty",
                    f"F brings {bags_f} pieces and {empty} lockers stand empty, so room is not what is "
                    "missing. Those empty lockers are not free: every one of them belongs "
                    "to a reservation."),
             Choice(f"Every locker is reserved: {old_in} × {reserve} = {handed_out}",
                    f"The old manager hands out {reserve} lockers per traveller, the most luggage anyone "
                    f"could bring, not what they carry: {old_in} × {reserve} = {handed_out} of {lockers}. "
                    f"The {empty} empty lockers already belong to someone. Ah-Ye lets in all {new_in}."),
             Choice(f"The six travellers' luggage ({total_luggage} pieces) is more than {lockers} lockers",
                    f"{total_luggage} pieces fit in {lockers} lockers with {lockers - total_luggage} to "
                    f"spare: Ah-Ye seats all {new_in} on the same wall. The old manager runs out of lockers "
                    "to promise, not of lockers to fill."),
             Choice("F is last in line",
                    "Being last decides who waits when someone must, not why anyone must: Ah-Ye seats F in "
                    f"the same round, on the same {lockers} lockers.")],
            answer=1,
        ),
        NumberQuestion(
            f"The story's opening question: only {bags} used, why {reserve} taken? (只用了 {bags} "
            f"格，為什麼占了 {reserve} 格？) Under the old manager's {reserve}-in-a-row rule, one traveller "
            f"brings {bags} pieces of luggage and another brings {single}. How many lockers sit locked but "
            "empty for the two together?",
            answer=old.internal_fragmentation, source=ContiguousAllocator,
            explanation=f"{reserve} − {bags} = {empty_each['first']} and {reserve} − {single} = "
                        f"{empty_each['second']}: {old.internal_fragmentation} lockers locked but empty "
                        f"(一次浪費 {empty_each['first']} 格、甚至 {empty_each['second']} 格). The old "
                        f"manager locks {reserve} in a row whatever you carry; Ah-Ye's BlockManager with one "
                        f"locker per page locks exactly {bags + single} and leaves {ahye_empty} empty.",
            too_low=f"Each traveller holds a whole row of {reserve} lockers: count the empty "
                    "ones in both rows.",
            too_high=f"The two hold only two rows of {reserve} lockers between them, and part of each "
                     "row holds luggage.",
            mistakes={
                empty_each["first"]: f"That is only the traveller with {bags} pieces. The one with {single} "
                                     f"holds a whole row of {reserve} too.",
                empty_each["second"]: f"That is only the traveller with {single}; the one with {bags} pieces "
                                      "leaves part of their row empty as well.",
                ahye_empty: "That is Ah-Ye's count: one locker per page, exactly what the luggage needs. "
                            f"The old manager locks {reserve} per traveller whatever they bring.",
                old.reserved_slots: f"That is every locker the two hold, two rows of {reserve}; some of them "
                                    "hold luggage.",
            },
        ),
        Question(
            f"On the chat workload, what happens to Ah-Ye's waste if she hands out blocks of {big} "
            f"instead of {small}?",
            [Choice(f"It stays at {waste[small]:.1%}",
                    f"Only the last block can be partly empty, true, but with blocks of {big} that block has "
                    f"{big} slots: a request can leave up to {big - 1} of them empty "
                    f"instead of {small - 1}."),
             Choice(f"It shrinks, from {waste[small]:.1%} to {waste[small] * small / big:.2%}",
                    "Bigger blocks make shorter block tables, not less waste: what is wasted is the empty "
                    "tail of each request's last block, and that tail grows with the block."),
             Choice(f"It grows, from {waste[small]:.1%} to {waste[big]:.1%}",
                    f"Each running request can leave up to {big - 1} slots of its last block empty (with "
                    f"{small}: {small - 1}). Measured: {waste[small]:.1%} with blocks of {small}, "
                    f"{waste[big]:.1%} with {big}. Small blocks waste less but make longer tables and "
                    "shorter contiguous reads: a trade-off (notebook 03).")],
            answer=2,
        ),
        Question(
            f"Both managers get the same {chat_slots:,} slots for the chat workload. How many requests ran "
            "at once, at most?",
            [Choice(f"{peak['contiguous']} with reservations, {peak['paged']} with paging",
                    f"A reservation costs {chat_reserve:,} slots whatever the request's length: "
                    f"{chat_slots:,} // {chat_reserve:,} = {peak['contiguous']}. Paging charges each request "
                    "only for the tokens it holds, rounded up to a block, so up to "
                    f"{peak['paged']} ran together."),
             Choice(f"{peak['contiguous']} either way: the memory is the same",
                    f"The memory is the same, but paging charges each request only for the tokens it holds, "
                    f"rounded up to a block of {small}, not {chat_reserve:,} slots up front."),
             Choice(f"{peak['paged']} either way: the windows are the same",
                    f"The windows are the same, but reservations of {chat_reserve:,} slots use up all "
                    f"{chat_slots:,} after {peak['contiguous']} requests: the free windows have no memory to "
                    "hand out.")],
            answer=0,
        ),
    ])
