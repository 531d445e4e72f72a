"""One Spark session (RayDP) for every test in tests/spark, on the tests' shared Ray.

Starting Spark on Ray takes about 15 s here, so the session is started once, when the first
Spark test runs, and stopped at the end of the test session, before Ray is.
"""

from __future__ import annotations

import pytest
import raydp

import raylog_spark


@pytest.fixture(scope="session")
def spark(cluster):
    session = raylog_spark.init_spark("raylog-tests", configs={"spark.ui.enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    raydp.stop_spark()
