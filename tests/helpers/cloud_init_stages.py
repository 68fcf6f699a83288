"""Run the parts of a cloud-config that create users and write files through cloud-init's own
modules, in the order /etc/cloud/cloud.cfg gives them, and report what became of each file.

Runs under the system python3 with Debian's cloud-init, inside a throw-away root (the test
overlays the host's root in a private mount namespace and chroots into it), so useradd and
chown act on that root only. Prints one JSON object: the modules run, the errors they raised,
and owner, group and mode of every write_files path."""

import grp
import json
import logging
import os
import pwd
import sys

import yaml
from cloudinit import distros, helpers
from cloudinit.config import cc_users_groups, cc_write_files, cc_write_files_deferred

HANDLERS = {
    "write-files": cc_write_files,
    "users-groups": cc_users_groups,
    "write-files-deferred": cc_write_files_deferred,
}


class Cloud:
    """What these three modules use of cloud-init's Cloud: the distro, and no datasource keys."""

    def __init__(self, distro):
        self.distro = distro

    def get_public_ssh_keys(self):
        return []


def stage_order() -> list[str]:
    with open("/etc/cloud/cloud.cfg") as f:
        system = yaml.safe_load(f)
    names = []
    for stage in ("cloud_init_modules", "cloud_config_modules", "cloud_final_modules"):
        for entry in system.get(stage, []):
            name = (entry[0] if isinstance(entry, list) else entry).replace("_", "-")
            if name in HANDLERS:
                names.append(name)
    return names


def main(path: str) -> None:
    with open(path) as f:
        cfg = yaml.safe_load(f)
    paths = helpers.Paths({"cloud_dir": "/var/lib/cloud"})
    cloud = Cloud(distros.fetch("debian")("debian", {}, paths))
    log = logging.getLogger("harness")
    ran, errors = [], {}
    for name in stage_order():
        ran.append(name)
        try:
            HANDLERS[name].handle(name, cfg, cloud, log, [])
        except Exception as e:  # cloud-init logs a failed module and goes on to the next
            errors[name] = f"{type(e).__name__}: {e}"
    files = {}
    for entry in cfg.get("write_files", []):
        p = entry["path"]
        if os.path.exists(p):
            st = os.stat(p)
            files[p] = {
                "owner": pwd.getpwuid(st.st_uid).pw_name,
                "group": grp.getgrgid(st.st_gid).gr_name,
                "mode": oct(st.st_mode & 0o7777),
            }
    print(json.dumps({"ran": ran, "errors": errors, "files": files}))


if __name__ == "__main__":
    main(sys.argv[1])
