"""Text2SQL evaluation on Spider's dev databases: filled databases (`fill`), the test-suite
execution match of Zhong et al. 2020 (`suite`), the seeded question sample (`sample`) and
the model evaluation (`evaluate`, `python -m benchmarks.text2sql.evaluate`)."""
