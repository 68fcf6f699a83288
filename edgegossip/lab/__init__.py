"""A lab of emulated devices on this machine: booted Debian containers (systemd-nspawn) with
sshd and systemd, one network namespace each on a bridge of their own, for the fleet commands to
be run and tested against as if they were Raspberry Pis. Needs root.

    root.py     the Debian root every device boots, built once with debootstrap and cached
    network.py  the lab's switch namespace, the devices' namespaces, loss and rate caps
    machines.py bring devices up and down, and the lab's state file
"""
