"""The fleet seen from the operator's machine: the inventory (fleet.toml) and its secrets, SSH to
the devices, what deploy ships and runs there, and collecting the trained model.

    inventory.py  fleet.toml: read, validate with one-line errors, write; device selection
    ansible.py    import hosts and groups from an Ansible INI or YAML inventory
    secrets.py    the secrets/ folder: link master key, SSH key pair, control-plane CURVE keys
    agentconf.py  each device's agent.toml, rendered from the inventory
    ssh.py        OpenSSH through subprocess: one connection per device, reused
    parallel.py   run one task per device, bounded and timed out, one outcome row each
    bundle.py     the wheelhouse and the per-device bundle deploy ships
    remote.py     the shell that runs on a device: install, service control, logs
"""
