"""Flashing: what a Raspberry Pi needs on its SD card's boot partition to join the fleet on its
first boot, written into a mounted boot partition, an image file or a removable disk.

    partitions.py  the MBR partition table: where the FAT boot partition starts
    boot.py        reading and writing the boot partition: a folder, or FAT through mtools
    disk.py        what makes a block device safe to write (removable, nothing of ours mounted)
    firstboot.py   the two first-boot formats (cloud-init NoCloud, firstrun.sh): detect, render
    wifi.py        the WPA PSK, hashed as Raspberry Pi Imager stores it
"""
