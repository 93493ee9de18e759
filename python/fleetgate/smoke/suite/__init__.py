"""The smoke suite: testinfra test modules run against hosts through the Ansible inventory.

    pytest --hosts='ansible://all' --ansible-inventory=INVENTORY python/fleetgate/smoke/suite

`fleetgate smoke run` runs it once per host, in parallel, and adds the fleet-relative check.
"""
