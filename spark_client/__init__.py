"""Spark jobs over Kafka's files through the lookup daemon (issue #5).

* `register(spark)` adds the `kafka-segments` batch data source: Spark's Kafka source, same
  options and schema, reading the brokers' segment files (spark_client.datasource).
* `resolve_positions(df, address)` adds segment, position and batch offsets to rows of
  (topic, partition, offset) or (topic, partition, timestamp) (spark_client.positions).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

from pyspark.sql import SparkSession

from .datasource import FORMAT, KafkaSegmentsDataSource
from .errors import DataLossError, OptionError, WorkerPythonError, install_excepthook, one_line
from .positions import resolve_positions

__all__ = ["FORMAT", "DataLossError", "KafkaSegmentsDataSource", "OptionError", "WorkerPythonError", "one_line",
           "register", "resolve_positions"]

log = logging.getLogger(__name__)
DEFAULT_WORKER_PYTHON = "python3"  # what PySpark runs its workers with when PYSPARK_PYTHON is unset
IMPORT_CHECK_TIMEOUT_S = 60  # importing pyarrow on a loaded machine takes seconds, not minutes


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("kafka-segments")` available in this session.

    On a local master the workers must run an interpreter that has this package: when neither
    PYSPARK_PYTHON nor spark.pyspark.python chose one, they run this one (sys.executable); one that
    cannot import spark_client fails here, at once, with one line saying what to set. An uncaught
    error of ours from a read (an unknown topic, an unreachable daemon, a bad option) prints as its
    one line (spark_client.errors.install_excepthook; SPARK_CLIENT_TRACEBACK=1 for Spark's whole error).
    """
    install_excepthook()
    _workers_python(spark)
    spark.dataSource.register(KafkaSegmentsDataSource)


def _workers_python(spark: SparkSession) -> None:
    """See register: on a cluster the executors' interpreter is the job's configuration (docs/spark.md)."""
    sc = spark.sparkContext
    if not sc.master.startswith("local"):
        return
    unset = "PYSPARK_PYTHON" not in os.environ and sc.getConf().get("spark.pyspark.python", None) is None
    if unset and sc.pythonExec == DEFAULT_WORKER_PYTHON:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # for sessions made later in this process
        sc.pythonExec = sys.executable  # what the data source's and later UDFs' workers are started with
        log.info("Spark's workers run %s (PYSPARK_PYTHON was unset)", sys.executable)
        return
    python = shutil.which(sc.pythonExec) or sc.pythonExec
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not samefile: a venv's python is a symlink
        return
    try:
        ok = subprocess.run([python, "-c", "import spark_client, pyarrow"], capture_output=True,
                            timeout=IMPORT_CHECK_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        raise WorkerPythonError(
            f"Spark's workers run {sc.pythonExec}, which cannot import spark_client and pyarrow: set "
            f"PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python) before the SparkSession is created, "
            f"or install kafka-lookupd[spark] for {sc.pythonExec}")
