"""One judge family for every comparison fleetgate makes, in the shape of Kayenta's
classifier / scorer split.

- `floors`: absolute floors (a measured value against a number from thresholds.yml or the class);
- `relative`: fleet-relative checks (a host against the median of its peers or a baseline);
- `compare`: statistical comparison of two sample sets per metric (the classifier): location
  (Mann-Whitney U with a Hodges-Lehmann shift and its confidence interval), spread
  (Brown-Forsythe) and event counts (an exact conditional binomial test);
- `score`: metric verdicts -> one gate verdict (critical flags, weights, fail closed);
- `explain`: the human explanation of a verdict.

The smoke suite's fleet-relative check, the rollout canary and `fleetgate judge` all go through
here; the plan picks the comparison for each metric, so no metric is judged twice.
"""
