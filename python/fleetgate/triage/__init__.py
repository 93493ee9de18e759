"""Triage: the article's fast-diagnosis walk (`fleetgate diagnose`), fleet drift and the cache
key (`fleetgate fleet drift` / `cache-key`).

Hosts only collect (playbooks/diagnose.yml runs the fleetgate_collect module); parsing and every
decision happen here, in pure functions tested against recorded outputs.
"""
