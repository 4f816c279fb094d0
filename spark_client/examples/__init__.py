"""Command-line Spark jobs over the sample log dir (`lookupd demo-data`) or a broker's log dirs."""
