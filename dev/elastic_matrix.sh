#!/usr/bin/env bash
# dev/elastic_matrix.sh: the elastic relaunch of 3- and 4-node jobs on a
# hostfile losing node 0 (rank 0's), a middle node and the last (issue 49
# item 2): tests/suites/elastic.sh case 6 for each K:I (K nodes, node I
# lost), one simulated cluster at a time. make test runs only 4:0 (the
# others take a few minutes each on a loaded 2-core machine).
#   bash dev/elastic_matrix.sh [K:I ...]     (default 3:0 3:1 3:2 4:0 4:1 4:3)
#   ELASTIC_VIA=slurm bash dev/elastic_matrix.sh   (sbatch --no-kill jobs of run_slurm.sbatch;
#                                                   K:0 loses the batch host: its guard goes on
#                                                   as a new job, scripts/elastic.sh)
# Needs root and network namespaces (scripts/cluster.sh). Prints the suite's
# lines and its summary; exit status: the suite's.
set -u
cd "$(dirname "$0")/.."
LOSE="${*:-3:0 3:1 3:2 4:0 4:1 4:3}"
ELASTIC_CASES=6 ELASTIC_LOSE="$LOSE" exec bash tests/suites/elastic.sh
