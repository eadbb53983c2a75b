#!/usr/bin/env bash
# A PRIVATE apt configuration under .cache/apt-private (its own sources list, lists, status and
# cache directories, on the same mirror as the system's sources) for fetching packages of newer
# Debian suites with `apt-get download` without touching the system's apt state. Sourced:
#   apt_private_init SUITE...   # sets APT_PRIVATE=(-o ...) for apt-get / apt-cache
# The suites already configured are kept, so scripts that need different suites share one list.
apt_private_init() {
    local here priv mirror keyring s
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    priv="$here/.cache/apt-private"
    mirror="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    mkdir -p "$priv/lists/partial" "$priv/cache/archives/partial" "$priv/etc/preferences.d" "$priv/etc/sources.list.d" "$priv/debs"
    [ -e "$priv/status" ] || : > "$priv/status"
    touch "$priv/etc/sources.list"
    local added=0
    for s in "$@"; do
        if ! grep -q " $s main\$" "$priv/etc/sources.list"; then
            echo "deb [signed-by=$keyring] $mirror $s main" >> "$priv/etc/sources.list"
            added=1
        fi
    done
    APT_PRIVATE=(-o "Dir::Etc::SourceList=$priv/etc/sources.list"
                 -o "Dir::Etc::SourceParts=$priv/etc/sources.list.d"
                 -o "Dir::Etc::Preferences=$priv/etc/preferences"
                 -o "Dir::Etc::PreferencesParts=$priv/etc/preferences.d"
                 -o "Dir::State::Lists=$priv/lists"
                 -o "Dir::State::status=$priv/status"
                 -o "Dir::Cache=$priv/cache"
                 -o "APT::Get::List-Cleanup=0")
    # refresh the private lists at most once a day, or when a suite was added
    if [ "$added" = 1 ] || [ -z "$(find "$priv/lists" -maxdepth 1 -name '*_InRelease' -mmin -1440 2>/dev/null | head -1)" ]; then
        echo "apt-private: apt-get update ($*) on $mirror"
        apt-get "${APT_PRIVATE[@]}" update -qq
    fi
}
