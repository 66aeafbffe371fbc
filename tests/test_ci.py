"""The test command itself: repeated runs on one machine must not fill its disk."""


def test_passing_tests_leave_no_folders_behind(pytestconfig, tmp_path_factory):
    # The training tests write gigabytes of checkpoints; with pytest's default every folder of the
    # last three sessions stays, and a CI machine that ran the suite a few times ran out of disk.
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"
    assert tmp_path_factory._retention_policy == "failed"  # what pytest's cleanup actually reads
