"""A small KB for the retrieval tests, with a restricted document, outdated and future versions and
facet-scoped pages, and the lexical and dense retrievers built over it once per module."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from kb.loader import load_kb
from kb.retrieve import Retriever


DAY = dt.date(2026, 6, 1)

DOCS = {
    "billing/refund-personal.md": """---
id: refund-personal
title: Early cancellation refunds for personal annual plans
version: "2026-02"
effective_from: 2026-02-01
supersedes: [refund-old]
applies_to: {customer_type: personal}
risk: medium
handoff_team: billing
---
# Who can get a refund
Personal customers who paid for an annual plan upfront get a refund for the full months left when they cancel.

# When the money arrives
Refunds reach the original card within 5 to 10 business days. A $30 fee is deducted.
""",
    "billing/refund-business.md": """---
id: refund-business
title: Ending a business contract early
applies_to: {customer_type: business}
---
# Termination fee
Business customers who end a contract before the minimum term pay 50% of the remaining monthly charges.
""",
    "billing/refund-old.md": """---
id: refund-old
title: Refund policy 2025
version: "2025-01"
---
# Refunds
All cancellations of annual plans were refunded within 14 days with no fee.
""",
    "home/router.md": """---
id: router-reset
title: Factory reset of the home router
---
# Factory reset
Hold the reset button on the back of the Hub 3 router for 15 seconds until the light turns purple.
""",
    "plans/loyalty-draft.md": """---
id: loyalty-draft
title: Loyalty rewards programme
status: draft
---
# Points
Customers will earn loyalty points for every month on an annual plan.
""",
    "plans/summer-promo.md": """---
id: summer-promo
title: Summer double data promotion
effective_from: 2026-07-01
effective_until: 2026-08-31
---
# Double data
Monthly plans get double data allowance during the summer promotion.
""",
    "plans/spring-promo.md": """---
id: spring-promo
title: Spring roaming promotion
effective_until: 2026-04-30
---
# Free roaming days
Roaming in Europe was free for three days on monthly plans during spring.
""",
}

SECRET = """---
id: internal-refund-override
title: Internal refund override codes for annual plan cancellation
acl: [agent]
---
# Override refund on annual plan cancel
Agents can refund a cancelled annual plan in full with override code ZETA-REFUND-9 at Sentinelworks.
"""

QUESTION = "Can I get a refund if I cancel my annual plan?"


def make_kb(root: Path, with_secret: bool = True) -> Path:
    for rel, text in DOCS.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    if with_secret:
        (root / "internal").mkdir(exist_ok=True)
        (root / "internal" / "override.md").write_text(SECRET, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def kb_dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("kbs")
    return make_kb(base / "with"), make_kb(base / "without", with_secret=False)


@pytest.fixture(scope="module")
def lexical(kb_dirs):
    return Retriever(load_kb(kb_dirs[0]), dense=False)


@pytest.fixture(scope="module")
def dense(kb_dirs, tmp_path_factory):
    r = Retriever(load_kb(kb_dirs[0]), cache_dir=tmp_path_factory.mktemp("cache"))
    assert r.dense_available, r.dense_error
    return r


def scores(res):
    return {h.locator: (h.lexical_score, h.dense_score, h.lexical_rank, h.dense_rank, h.fused_rank) for h in res.hits}
