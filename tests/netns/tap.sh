#!/usr/bin/env bash
# Run inside a fresh network namespace (`unshare -n`): brings up lo and a TAP device for the
# smoltcp gateway, with 169.254.1.1/16 on the kernel side and route_localnet, so that the
# gateway (169.254.1.2, default route via 169.254.1.1) reaches the NameServer and broker that
# listen on 127.0.0.1 inside the same namespace. Touches nothing outside the namespace.
set -euo pipefail
dev=${1:-tap0}
ip link set lo up
ip tuntap add dev "$dev" mode tap
ip addr add 169.254.1.1/16 dev "$dev"
ip link set "$dev" up
echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
echo 1 > "/proc/sys/net/ipv4/conf/$dev/route_localnet"
# ARP requests for the gateway must come from 169.254.1.1: by default the kernel takes the
# source of the packet that needs the resolution (127.0.0.1, the brokers' address here), and a
# stack that only answers requests from its own subnet (smoltcp) ignores them. That only
# matters once the kernel has lost the gateway's address (a link down/up): before, it learns it
# from the gateway's own requests.
echo 2 > /proc/sys/net/ipv4/conf/all/arp_announce
echo 2 > "/proc/sys/net/ipv4/conf/$dev/arp_announce"
