import random

import pytest

from conftest import make_block, make_refs
from geofidelity_bench.benchmark import Benchmark, City, load_benchmark
from geofidelity_bench.prompts import (
    CONDITIONS,
    NEGATIVE_PROMPT,
    PromptError,
    build_prompt,
    build_prompts,
    location_text,
    select_donor,
)


@pytest.fixture
def paris():
    blocks = [
        make_block("p1", street="Rue de Rivoli", neighborhood="Louvre", stratum="major", centroid=(48.86061, 2.33765)),
        make_block("p2", street="Rue Oberkampf", neighborhood="Oberkampf", stratum="major", centroid=(48.865, 2.37)),
        make_block("p3", street="Rue Cler", neighborhood="Gros-Caillou", stratum="residential", centroid=(48.856, 2.30)),
        make_block("p4", street="Rue de Rivoli", neighborhood="Louvre", stratum="major", centroid=(48.859, 2.34)),
        make_block("t1", city="new_york", country="US", street="Broadway", neighborhood="SoHo", stratum="major",
                   centroid=(40.72, -74.0)),
    ]
    refs = sum((make_refs(b.block_id, 3, i) for i, b in enumerate(blocks)), [])
    return Benchmark(blocks, refs, name="paris")


def test_spec_strings_byte_for_byte(paris):
    lat, lon = paris.block("p1").centroid
    assert build_prompt(paris, "p1", "L0").text == (
        "A street-level photograph taken in Paris, FR. The image shows a typical street scene with buildings, "
        "roads, and urban environment characteristic of this location. Photorealistic, daytime, clear weather."
    )
    assert build_prompt(paris, "p1", "L1").text == (
        "A street-level photograph taken on Rue de Rivoli in the Louvre district of Paris, FR. The image shows a "
        "typical street scene with buildings, roads, and urban environment characteristic of this block. "
        "Photorealistic, daytime, clear weather."
    )
    assert build_prompt(paris, "p1", "L2").text == (
        "A street-level photograph taken on Rue de Rivoli in the Louvre district of Paris, FR, near GPS coordinates "
        f"({lat:.4f}, {lon:.4f}). The image shows a typical street scene with buildings, roads, and urban "
        "environment characteristic of this block. Photorealistic, daytime, clear weather."
    )
    assert "(48.8611, 2.3377)" in build_prompt(paris, "p1", "L2").text
    assert build_prompt(paris, "p1", "GPS_ONLY").text == (
        "A street-level photograph taken near GPS coordinates (48.8611, 2.3377). The image shows a typical street "
        "scene with buildings, roads, and urban environment. Photorealistic, daytime, clear weather."
    )
    assert build_prompt(paris, "t1", "L0").text.startswith("A street-level photograph taken in New York, US.")
    assert NEGATIVE_PROMPT == (
        "panorama, fisheye, black and white, illustration, painting, cartoon, 3d render, watermark, text overlay, "
        "blurry, low resolution, night, people close up, indoor"
    )
    assert location_text("Rue Cler", "Gros-Caillou", "Paris", "FR") == (
        "A photo of Rue Cler in the Gros-Caillou district of Paris, FR."
    )


def test_controls_use_donor_names(paris):
    ws = build_prompt(paris, "p1", "C_WRONG_STREET")
    donor = paris.block(ws.street_donor)
    assert ws.street_donor_scope == "same_city"
    assert ws.text == build_prompt(paris, "p1", "L1").text.replace("Rue de Rivoli", donor.street_name)
    sn = build_prompt(paris, "p1", "C_SHUFFLED_NEIGHBORHOOD")
    both = build_prompt(paris, "p1", "C_WRONG_STREET_NEIGHBORHOOD")
    assert (both.street_donor, both.neighborhood_donor) == (ws.street_donor, sn.neighborhood_donor)
    assert f"on {donor.street_name} in the {paris.block(sn.neighborhood_donor).neighborhood} district" in both.text


def test_control_prompts_record_both_donors_and_scopes(paris):
    # docs/benchmark.md section 2: every control prompt records its donor block ids and scopes;
    # the combined control reuses the two single-control donors.
    for block in paris.blocks:
        s_donor, s_scope = select_donor(block, paris.blocks, "street_name")
        n_donor, n_scope = select_donor(block, paris.blocks, "neighborhood")
        street, hood = paris.block(s_donor).street_name, paris.block(n_donor).neighborhood
        city = {"paris": "Paris", "new_york": "New York"}[block.city]
        expected = {
            "C_WRONG_STREET": ((s_donor, s_scope, None, None), street, block.neighborhood),
            "C_SHUFFLED_NEIGHBORHOOD": ((None, None, n_donor, n_scope), block.street_name, hood),
            "C_WRONG_STREET_NEIGHBORHOOD": ((s_donor, s_scope, n_donor, n_scope), street, hood),
        }
        for condition, (donors, s, n) in expected.items():
            p = build_prompt(paris, block.block_id, condition)
            assert (p.block_id, p.condition) == (block.block_id, condition)
            assert (p.street_donor, p.street_donor_scope, p.neighborhood_donor, p.neighborhood_donor_scope) == donors
            assert p.text == (
                f"A street-level photograph taken on {s} in the {n} district of {city}, {block.country}. The image "
                "shows a typical street scene with buildings, roads, and urban environment characteristic of this "
                "block. Photorealistic, daytime, clear weather."
            )
            assert p.negative_prompt == NEGATIVE_PROMPT
    assert select_donor(paris.block("t1"), paris.blocks, "neighborhood")[1] == "global_fallback"


def test_donor_rules(paris):
    target = paris.block("p1")
    # p4 shares the street name -> never a street donor; p2 is same city + same stratum (rank 0).
    assert select_donor(target, paris.blocks, "street_name") == ("p2", "same_city")
    # p4 shares the neighborhood too; p2 is the only rank-0 neighborhood donor.
    assert select_donor(target, paris.blocks, "neighborhood") == ("p2", "same_city")
    # p3: no same-stratum same-city donor -> best rank is 1 (same city), uniformly among p1, p2, p4.
    donors = {select_donor(paris.block("p3"), paris.blocks, "street_name")[0]}
    assert donors <= {"p1", "p2", "p4"}
    # New York has one block: global fallback, best rank 2 (same stratum 'major' in another city).
    donor, scope = select_donor(paris.block("t1"), paris.blocks, "street_name")
    assert scope == "global_fallback" and donor in {"p1", "p2", "p4"}


def test_donor_draw_is_seeded_by_block_and_key():
    import random

    blocks = [make_block(f"c{i}", street=f"Street {i}", neighborhood=f"N{i}") for i in range(8)]
    target = blocks[0]
    expected = random.Random("c0|street_same_city").choice(sorted(blocks[1:], key=lambda b: b.block_id)).block_id
    assert select_donor(target, blocks, "street_name") == (expected, "same_city")
    expected_n = random.Random("c0|neighborhood_same_city").choice(blocks[1:]).block_id
    assert select_donor(target, blocks, "neighborhood") == (expected_n, "same_city")


def test_unknown_names_are_refused_not_invented():
    bench = load_benchmark("demo")
    for condition in ("L1", "L2", "C_WRONG_STREET", "C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET_NEIGHBORHOOD"):
        with pytest.raises(PromptError, match=r"lund_seg1.*no street_name"):
            build_prompt(bench, "lund_seg1", condition)
    assert "Lund, SE" in build_prompt(bench, "lund_seg1", "L0").text
    assert "Am Lustgarten in the Mitte district of Berlin, DE" in build_prompt(bench, "berlin_am_lustgarten", "L1").text


def test_no_donor_is_a_clear_error():
    bench = load_benchmark("demo")
    with pytest.raises(
        PromptError,
        match="berlin_am_lustgarten.*no other block has a known street_name .*; control prompts need a donor$",
    ):
        build_prompt(bench, "berlin_am_lustgarten", "C_WRONG_STREET")


def test_select_donor_names_the_bad_attribute():
    blocks = [make_block(f"c{i}", street=f"Street {i}", neighborhood=f"N{i}") for i in range(3)]
    with pytest.raises(ValueError, match="attribute must be 'street_name' or 'neighborhood', got 'street'"):
        select_donor(blocks[0], blocks, "street")


def _donor_by_the_documented_rule(target, blocks, attribute):
    """docs/benchmark.md section 2, Control donors, written out as a brute-force search."""
    stem = {"street_name": "street", "neighborhood": "neighborhood"}[attribute]
    own = getattr(target, attribute)
    candidates = sorted(
        [b for b in blocks if b.block_id != target.block_id and getattr(b, attribute) not in (None, "", own)],
        key=lambda b: b.block_id,
    )
    if not candidates:
        return None
    same_city = [b for b in candidates if b.city == target.city]
    scope, searched = ("same_city", same_city) if same_city else ("global_fallback", candidates)
    for wanted in range(4):  # 0 = same city and stratum, 1 = same city, 2 = same stratum, 3 = other
        tier = []
        for b in searched:
            city, stratum = b.city == target.city, bool(target.stratum) and b.stratum == target.stratum
            rank = 0 if city and stratum else 1 if city else 2 if stratum else 3
            if rank == wanted:
                tier.append(b)
        if tier:
            return random.Random(f"{target.block_id}|{stem}_{scope}").choice(tier).block_id, scope
    raise AssertionError("unreachable")


def test_donors_follow_the_documented_rule_on_a_seeded_random_benchmark():
    rng = random.Random(20231)
    streets = [f"Street {i}" for i in range(6)] + [None]
    hoods = [f"Hood {i}" for i in range(4)] + [None]
    blocks = [
        make_block(f"b{i:02d}", city=rng.choice(["paris", "paris", "lyon", "lyon", "nice"]),
                   stratum=rng.choice(["major", "residential", "pedestrian", None]),
                   street=rng.choice(streets), neighborhood=rng.choice(hoods))
        for i in range(40)
    ]
    # two single-block cities: their controls must fall back to the global search
    blocks.append(make_block("x1", city="oslo", country="NO", stratum="major", street="Karl Johans gate",
                             neighborhood="Sentrum"))
    blocks.append(make_block("x2", city="bergen", country="NO", stratum=None, street="Bryggen",
                             neighborhood="Bergenhus"))
    scopes = set()
    for attribute in ("street_name", "neighborhood"):
        for target in blocks:
            expected = _donor_by_the_documented_rule(target, blocks, attribute)
            if expected is None:
                with pytest.raises(PromptError, match="control prompts need a donor"):
                    select_donor(target, blocks, attribute)
                continue
            assert select_donor(target, blocks, attribute) == expected, (target.block_id, attribute)
            scopes.add(expected[1])
    assert scopes == {"same_city", "global_fallback"}


def test_missing_names_are_all_named_with_what_to_use_instead():
    bench = Benchmark([make_block("p1"), make_block("p2", street="Rue A", neighborhood="Marais")],
                      make_refs("p1", 3) + make_refs("p2", 3, 1), name="t")
    with pytest.raises(PromptError, match=r"^block 'p1' has no street_name and no neighborhood; condition L1 "
                                          r"needs the real names and none will be invented "
                                          r"\(use L0 or GPS_ONLY for this block\)$"):
        build_prompt(bench, "p1", "L1")


def test_unknown_condition(paris):
    with pytest.raises(PromptError, match="unknown prompt condition 'L9'"):
        build_prompt(paris, "p1", "L9")


def test_build_prompts_covers_all(paris):
    prompts = build_prompts(paris, CONDITIONS)
    assert len(prompts) == len(CONDITIONS) * 5
    assert all(p.text.endswith("Photorealistic, daytime, clear weather.") for p in prompts)
    # every prompt carries its own block and condition
    assert [(p.condition, p.block_id) for p in prompts] == [(c, b) for c in CONDITIONS for b in paris.block_ids]


def test_build_prompts_for_chosen_blocks(paris):
    prompts = build_prompts(paris, ["L0", "L1"], block_ids=iter(["p3", "t1"]))
    assert [(p.condition, p.block_id) for p in prompts] == [("L0", "p3"), ("L0", "t1"), ("L1", "p3"), ("L1", "t1")]
    assert prompts[1].text == build_prompt(paris, "t1", "L0").text


def test_city_name_comes_from_the_cities_record():
    # docs/benchmark.md section 2: {city} is the cities record's name when there is one.
    blocks = [
        make_block("s1", city="sao_paulo", country="BR", street="Avenida Paulista", neighborhood="Bela Vista",
                   centroid=(-23.56, -46.65)),
        make_block("s2", city="sao_paulo", country="BR", street="Rua Augusta", neighborhood="Consolacao",
                   centroid=(-23.55, -46.66)),
        make_block("r1", city="rio_de_janeiro", country="BR", street="Rua X", neighborhood="Centro",
                   centroid=(-22.9, -43.2)),
    ]
    refs = sum((make_refs(b.block_id, 3, i) for i, b in enumerate(blocks)), [])
    bench = Benchmark(blocks, refs, cities=[City("sao_paulo", "São Paulo", "BR", None, "R")], name="br")
    assert build_prompt(bench, "s1", "L0").text.startswith("A street-level photograph taken in São Paulo, BR. ")
    for condition in ("L1", "L2", "C_WRONG_STREET", "C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET_NEIGHBORHOOD"):
        assert " district of São Paulo, BR" in build_prompt(bench, "s1", condition).text
    # no record: the display name of the key
    assert build_prompt(bench, "r1", "L0").text.startswith("A street-level photograph taken in Rio De Janeiro, BR. ")


@pytest.mark.parametrize("lat, lon", [(999.0, float("inf")), (float("nan"), 2.0), (48.0, 181.0)])
def test_no_prompt_reads_nan_or_inf(lat, lon):
    from geofidelity_bench.prompts import text_gps_only, text_l1

    with pytest.raises(PromptError, match="cannot go into a prompt"):
        text_gps_only(lat, lon)
    with pytest.raises(PromptError, match="cannot go into a prompt"):
        text_l1("Rue A", "Marais", "Paris", "FR", gps=(lat, lon))


def test_a_block_with_an_impossible_centroid_gets_no_prompt():
    # Loading refuses it (test_benchmark); a benchmark built without that check still never prints inf.
    import dataclasses

    good = make_block("p1", street="Rue A", neighborhood="Marais")
    bench = Benchmark([good], make_refs("p1", 3), name="t")
    bad = dataclasses.replace(good, centroid=(999.0, float("inf")))
    object.__setattr__(bench, "_by_id", {"p1": bad})
    with pytest.raises(PromptError, match=r"block 'p1': no GPS_ONLY prompt.*lat 999\.0 is outside"):
        build_prompt(bench, "p1", "GPS_ONLY")
    with pytest.raises(PromptError, match=r"block 'p1': no L2 prompt"):
        build_prompt(bench, "p1", "L2")
    assert "inf" not in build_prompt(bench, "p1", "L0").text
    # the reason names the bad coordinate, longitude included
    object.__setattr__(bench, "_by_id", {"p1": dataclasses.replace(good, centroid=(48.0, float("inf")))})
    with pytest.raises(PromptError, match=r"block 'p1': no GPS_ONLY prompt.*\(lon inf is not finite\)"):
        build_prompt(bench, "p1", "GPS_ONLY")
