"""Verify the overlay step for a recipe that asks for none built nothing: no overlay folder under the
model root on any rank (testinfra, read-only; tests/test_overlay_lab.py builds and verifies one)."""


def test_no_overlay_folder_was_made_for_a_recipe_without_one(host):
    listing = host.run("find /var/lib/sparkplay/models -maxdepth 1 -name '*overlay*'")
    assert listing.rc == 0 and listing.stdout.strip() == ""
