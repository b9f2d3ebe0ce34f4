"""The monitoring mixin: one configuration, from which every alert, dashboard and Grafana
provisioning file of the stack is generated."""
