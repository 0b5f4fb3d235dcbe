"""Start fakepve 0.5.0 for talosprov's tests, on a loopback address, with a certificate
made by the test, API tokens and grants, nodes and storages; fill the fake's gaps
(reference/proxmox.md section 7) so those code paths are really checked; then take
commands (JSON lines on stdin, answers on stdout) until stdin closes.

    python fakepve_launch.py '{"host": "127.0.0.9", "port": 0, "cert": "..", "key": "..", ...}'

The first line on stdout is {"url": "https://127.0.0.9:<port>"} once it listens.
"""

import asyncio
import ipaddress
import json
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse

import aiohttp
from fakepve import FakePve, PveError, TaskError
from fakepve import formats as pve_formats
from fakepve import schema as pve_schema
from fakepve import shapes
from fakepve.lxc import SIZE_UNITS, format_size
from fakepve.qemu import join_drive, split_drive, volume_ref
from fakepve.routing import DIGEST_CHANGED, die, param_error, sha1, split_list


def is_loopback_url(url):
    """True for a URL on 127.0.0.0/8, ::1 or localhost: the only places a test may reach."""
    host = urllib.parse.urlsplit(url).hostname or ''
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == 'localhost'


def size_bytes(text):
    """A resize or drive size ('50G', '+1G', '528K', '1048576') in bytes."""
    found = re.fullmatch(r'\+?(\d+(?:\.\d+)?)([KMGT]?)', str(text))
    if not found:
        return None
    return int(float(found.group(1)) * SIZE_UNITS.get(found.group(2), 1))


def _format_check(pattern, message):
    return lambda value: None if re.fullmatch(pattern, value) else message


# Gap: fakepve 0.5.0 accepts any value for pve-ha-manager's formats. Here they are added to
# its named formats (the schema's '-list' forms follow), with PVE/HA/Tools.pm's checks and
# messages: pve_verify_ha_resource_id, pve_verify_ha_resource_or_vm_id, pve_verify_ha_node.
for _name, _pattern, _message in (
        ('pve-ha-resource-id', r'[a-z]+:\S+', 'value does not look like a valid ha resource id'),
        ('pve-ha-resource-or-vm-id', r'[a-z]+:\S+|\d+', 'value does not look like a valid ha resource id'),
        ('pve-ha-node', r'[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?(?::\d+)?',
         'value does not look like a valid ha node')):
    pve_formats.NAMED.setdefault(_name, _format_check(_pattern, _message))
del _name, _pattern, _message

# A property PVE's JSONSchema does not know for the parameters it checks.
NOT_IN_SCHEMA = 'property is not defined in schema and the schema does not allow additional properties'


class TalosprovFake(FakePve):
    """FakePve with the gaps talosprov's tests need filled."""

    def __init__(self, *args, fetch_downloads=False, **kwargs):
        super().__init__(*args, **kwargs)
        # Gap: /cluster/mapping/pci is generic in fakepve (POST stores nothing, GET
        # answers a placeholder). Here: id -> {'description': str or None, 'map': [str]}.
        self.pci_mappings = {}
        # Gap: a storage's volumes are cluster-wide in fakepve, even for local storage.
        # Here: (storage, node) -> volume names of import content on a non-shared storage.
        self.node_volumes = {}
        # Gap: fakepve's download-url never fetches the URL. With this on, the launcher
        # fetches it (loopback only) and the file's size is the volume's size.
        self.fetch_downloads = fetch_downloads
        # Creates whose answer is lost after the VM was created (see _qm_create).
        self.lose_create_answers = 0
        # A kill point (see Control.do_hold_after): None, or the requests let through so
        # far, how many may pass, the ones held since, and the event that releases them.
        self.gate = None
        # Connection resets: (method, path suffix, text the path contains or '') ->
        # how many more requests get one.
        self.resets = {}
        # Slow tasks: task type -> real seconds each takes (run after the answer).
        self.slow_tasks = {}
        # Gap: /nodes/{node}/network is generic in fakepve. Here: node -> its Linux
        # bridges (every node has vmbr0 and vmbr1 unless the test says otherwise).
        self.bridges = {}
        # Gap: /nodes/{node}/status is generic in fakepve. Here: node -> its available
        # memory in bytes (64 GiB of 128 unless the test says otherwise).
        self.host_memory = {}
        # Gap: /cluster/ha/{resources,rules,groups} are generic in fakepve (nothing stored).
        # Here, pve-ha-manager's three section configs as it parses them: sid -> the
        # resource's options (those set, with its `type`); rule id -> its options
        # (`resources` a set of sids, `nodes` {node: priority}), in file order, which is
        # the rule's `order`; group id -> its options (`nodes` a list of node[:priority]).
        self.ha_resources = {}
        self.ha_rules = {}
        self.ha_groups = {}
        # Per HA resource: the guest object it belongs to (None once it is gone), the
        # HA state last given to that guest (fakepve's ha_state, which its start, stop
        # and destroy read), and whether the guest's destroy asked to purge it.
        self.ha_links = {}

    # ------------------------------------------------------- network faults

    async def _answer(self, request, handler, generic, path_node):
        # A connection reset (TCP RST) instead of an answer, for the next `times`
        # requests matching a rule: what a proxy or a flaky link does. The request
        # is recorded first, so a test sees each attempt.
        for key, left in list(self.resets.items()):
            if request.method == key[0] and request.path.endswith(key[1]) and key[2] in request.path:
                if left <= 1:
                    del self.resets[key]
                else:
                    self.resets[key] = left - 1
                sock = request.transport.get_extra_info('socket')
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
                request.transport.abort()
                raise asyncio.CancelledError()
        return await self._answer_at_kill_point(request, handler, generic, path_node)

    async def task(self, node, ttype, tid, user, body, vm=None, lock=True, log=()):
        # A slow task type runs after the answer (its UPID comes back at once) and
        # takes the given real seconds, whatever the time scale.
        secs = self.slow_tasks.get(ttype)
        if not secs:
            return await super().task(node, ttype, tid, user, body, vm=vm, lock=lock, log=log)

        async def slow_body():
            await asyncio.sleep(secs)
            return await body()
        scale = self.time_scale
        self.time_scale = scale or 1e-9
        try:
            return await super().task(node, ttype, tid, user, slow_body, vm=vm, lock=lock, log=log)
        finally:
            self.time_scale = scale

    # ------------------------------------------------------------- kill points

    async def _answer_at_kill_point(self, request, handler, generic, path_node):
        # Every request after the gate's count waits until the test releases it: the
        # client then hangs at a known request, where the test kills it. Released, the
        # first held request is served if asked (it reached PVE before the client
        # died) and every other one is dropped unserved.
        from fakepve.server import error
        gate = self.gate
        if gate is None:
            return await super()._answer(request, handler, generic, path_node)
        gate['seen'] += 1
        at = gate.get('at')
        if at is not None:
            # Held from the first request that matches (method, path suffix) on.
            if not gate['held'] and not (request.method == at[0] and request.path.endswith(at[1])):
                return await super()._answer(request, handler, generic, path_node)
        elif gate['seen'] <= gate['after']:
            return await super()._answer(request, handler, generic, path_node)
        gate['held'].append('{0} {1}'.format(request.method, request.path))
        first = len(gate['held']) == 1
        await gate['release'].wait()
        try:
            if first and gate['serve_first']:
                return await super()._answer(request, handler, generic, path_node)
            return error(595, 'No route to host')
        finally:
            if first:
                gate['first_done'].set()

    # ------------------------------------------------------------ PCI mappings

    def _routes_talosprov_mapping(self):
        pci = '/cluster/mapping/pci'
        return [('GET', pci, self._pci_list), ('POST', pci, self._pci_create),
                ('GET', pci + '/{id}', self._pci_read), ('PUT', pci + '/{id}', self._pci_update),
                ('DELETE', pci + '/{id}', self._pci_delete)]

    @staticmethod
    def _as_list(value):
        if value is None:
            return []
        return list(value) if isinstance(value, list) else [value]

    def _pci_entry(self, mid):
        entry = self.pci_mappings[mid]
        out = {'id': mid, 'map': list(entry['map'])}
        if entry['description'] is not None:
            out['description'] = entry['description']
        return out

    async def _pci_list(self, v, user):
        return [self._pci_entry(mid) for mid in sorted(self.pci_mappings)]

    async def _pci_create(self, v, user):
        mid = v['id']
        if mid in self.pci_mappings:
            raise die("create hardware mapping failed: pci ID '{0}' already defined".format(mid))
        self.pci_mappings[mid] = {'description': v.get('description'), 'map': self._as_list(v.get('map'))}
        return None

    async def _pci_read(self, v, user):
        if v['id'] not in self.pci_mappings:
            raise die("mapping '{0}' not found".format(v['id']))
        return dict(self._pci_entry(v['id']), digest='0' * 40)

    async def _pci_update(self, v, user):
        mid = v['id']
        if mid not in self.pci_mappings:
            raise die("update hardware mapping failed: pci ID '{0}' does not exist".format(mid))
        entry = self.pci_mappings[mid]
        if v.get('map') is not None:
            entry['map'] = self._as_list(v['map'])
        if v.get('description') is not None:
            entry['description'] = v['description']
        for key in split_list(v.get('delete')):
            if key == 'description':
                entry['description'] = None
        return None

    async def _pci_delete(self, v, user):
        self.pci_mappings.pop(v['id'], None)
        return None

    def _mapping_on_node(self, mid, node):
        entry = self.pci_mappings.get(mid)
        return entry is not None and any(dict(kv.partition('=')[::2] for kv in m.split(',')).get('node') == node
                                         for m in entry['map'])

    # ----------------------------------------------------------------- network

    def _routes_talosprov_network(self):
        return [('GET', '/nodes/{node}/network', self._network_list)]

    async def _network_list(self, v, user):
        # PVE's API2/Network.pm: `type` filters; any_bridge is Linux and OVS bridges (and,
        # with SDN, VNets). Each bridge as PVE lists it (the fields the tests need).
        kind = v.get('type')
        if kind not in (None, 'bridge', 'any_bridge', 'any_local_bridge'):
            return []
        names = self.bridges.get(v['node'], ['vmbr0', 'vmbr1'])
        return [{'iface': name, 'type': 'bridge', 'active': 1, 'autostart': 1,
                 'families': ['inet'], 'method': 'manual', 'priority': i + 1}
                for i, name in enumerate(names)]

    def _routes_talosprov_node_status(self):
        return [('GET', '/nodes/{node}/status', self._node_status)]

    async def _node_status(self, v, user):
        # PVE's API2/Nodes.pm status: memory {total, used, free, available} in bytes.
        total = 128 * 1024 ** 3
        available = self.host_memory.get(v['node'], 64 * 1024 ** 3)
        return {'memory': {'total': total, 'used': total - available, 'free': available,
                           'available': available},
                'cpu': 0.02, 'cpuinfo': {'cores': 16, 'cpus': 32, 'sockets': 2, 'model': 'fake'},
                'pveversion': 'pve-manager/' + self.version, 'uptime': 3600,
                'loadavg': ['0.10', '0.10', '0.10'],
                'rootfs': {'total': 100 * 1024 ** 3, 'used': 10 * 1024 ** 3,
                           'avail': 90 * 1024 ** 3, 'free': 90 * 1024 ** 3}}

    # ------------------------------------------------------------------ resize

    def _routes_talosprov_resize(self):
        return [('PUT', '/nodes/{node}/qemu/{vmid}/resize', self._resize)]

    async def _resize(self, v, user):
        # Gap: fakepve's resize is generic (a UPID, no change). Here it changes the size,
        # refuses to shrink, and runs under the VM config lock, as qemu-server does.
        vm = self.find(v['node'], v['vmid'])
        self._check_lock(vm)
        disk = v['disk']
        if disk not in vm.config:
            raise die("disk '{0}' does not exist".format(disk))
        volume, props = split_drive(vm.config[disk])
        current = size_bytes(props.get('size', '0')) or 0
        asked = str(v['size'])
        wanted = size_bytes(asked)
        if wanted is None:
            raise PveError(400, 'Parameter verification failed.', {'size': 'unable to parse size'})
        new = current + wanted if asked.startswith('+') else wanted
        if new < current:
            raise die("shrinking disks is not supported")

        async def body():
            props['size'] = format_size(new)
            vm.config[disk] = join_drive(volume, props)
            sid, name = volume_ref(volume)
            vol = self.storages.get(sid, {}).get('volumes', {}).get(name)
            if vol is not None:
                vol['size'] = new
        return await self.task(vm.node, 'resize', vm.vmid, user, body, vm=vm)

    # ---------------------------------------------------------------------- HA

    def _pve_major(self):
        return int(str(self.version).split('.')[0])

    def _routes_talosprov_ha(self):
        res, rules, groups = '/cluster/ha/resources', '/cluster/ha/rules', '/cluster/ha/groups'
        return [('GET', res, self._ha_resource_list), ('POST', res, self._ha_resource_create),
                ('GET', res + '/{sid}', self._ha_resource_read),
                ('PUT', res + '/{sid}', self._ha_resource_update),
                ('DELETE', res + '/{sid}', self._ha_resource_delete),
                ('GET', rules, self._ha_rule_list), ('POST', rules, self._ha_rule_create),
                ('GET', rules + '/{rule}', self._ha_rule_read),
                ('PUT', rules + '/{rule}', self._ha_rule_update),
                ('DELETE', rules + '/{rule}', self._ha_rule_delete),
                ('GET', groups, self._ha_group_list), ('POST', groups, self._ha_group_create),
                ('GET', groups + '/{group}', self._ha_group_read),
                ('PUT', groups + '/{group}', self._ha_group_update),
                ('DELETE', groups + '/{group}', self._ha_group_delete)]

    def _stateful_handler(self, template, handler):
        # PVE 8 has no HA rules: its API server answers their paths as any path it has no
        # handler for (PVE::APIServer's rest_handler), before permissions and parameters.
        serve = super()._stateful_handler(template, handler)
        if not template.startswith('/cluster/ha/rules'):
            return serve

        async def versioned(request):
            if self._pve_major() < 9:
                rel = '/' + request.path.split('/', 3)[3]  # below /api2/<format>
                raise PveError(501, "Method '{0} {1}' not implemented".format(request.method, rel))
            return await serve(request)
        return versioned

    def _ha_pve8_params(self, v, names):
        # PVE 8's pve-ha-manager (4.x) has neither failback nor auto-rebalance on resources
        # nor purge on their deletion (they came with the rules in 5.x): its schema refuses them.
        if self._pve_major() < 9:
            bad = dict((name, NOT_IN_SCHEMA) for name in names if name in v)
            if bad:
                raise param_error(**bad)

    def _ha_groups_migrated(self):
        # PVE::HA::Config::have_groups_been_migrated (PVE 9): no group is left. PVE 8 has no
        # rules to migrate to, so its groups never are.
        return self._pve_major() >= 9 and not self.ha_groups

    @staticmethod
    def _ha_digest(config):
        # SectionConfig's digest is the SHA-1 of the file; here of the config it holds.
        return sha1(json.dumps(config, sort_keys=True, default=sorted))

    def _ha_guest(self, kind, vmid):
        return self.vm(vmid) if kind == 'vm' else self.ct(vmid) if kind == 'ct' else None

    def _ha_parse_sid(self, text):
        # PVE::HA::Config::parse_sid: a bare VMID takes its guest's type.
        text = str(text)
        if re.fullmatch(r'\d+', text):
            guest = self.guest(int(text))
            if guest is None:
                raise die('unable to detect SID from VMID - VM/CT {0} does not exist'.format(text))
            kind = 'vm' if self.vm(int(text)) is guest else 'ct'
            return '{0}:{1}'.format(kind, text), kind, text
        found = re.fullmatch(r'(\S+):(\S+)', text)
        if not found:
            raise die("unable to parse service id '{0}'".format(text))
        return text, found.group(1), found.group(2)

    @staticmethod
    def _ha_crm_state(state):
        # The CRM's state for a requested one: 'enabled' is 'started', a disabled resource is
        # kept stopped, an ignored one is not managed at all (PVE::HA::Config's
        # service_check_ha_state), so fakepve's start and stop go straight to the guest.
        state = state or 'started'
        return {'enabled': 'started', 'disabled': 'stopped', 'ignored': None}.get(state, state)

    async def _ha_apply(self, sid):
        """What the CRM does with a resource's requested state: the guest shows it as its HA
        state at once, and is started or stopped ha_delay PVE seconds later (as fakepve's HA
        start and stop requests are)."""
        link = self.ha_links.get(sid)
        guest = link and link['guest']
        if guest is None:
            return
        want = self._ha_crm_state(self.ha_resources[sid].get('state'))
        guest.ha_state = link['mirror'] = want
        if want is None or guest.template or (guest.status == 'running') == (want == 'started'):
            return

        async def later():
            await self.pause(self.ha_delay)
            if link['guest'] is not guest or guest.ha_state != want:
                return  # changed or gone meanwhile
            if want == 'started':
                if guest in self.cts:
                    self._apply(guest)
                    guest.pid = next(self._ct_pids)
                else:
                    guest.apply_pending()
                    guest.qmpstatus = 'running'
                guest.status = 'running'
                guest.started_at = time.time()
            else:
                guest.status = 'stopped'
                if guest in self.cts:
                    guest.pid = None
                else:
                    guest.qmpstatus = 'stopped'
        if self.time_scale:
            asyncio.ensure_future(later())
        else:
            await later()

    def _ha_sync(self):
        """Bring the HA resources in line with the guests: a guest destroyed with purge takes
        its resource (and its place in rules) along, as qemu-server's destroy does; a guest
        fakepve made HA managed itself (create with ha-managed, or a test's ha_state) has
        one; and a start or stop of an HA managed guest through fakepve's HA request is the
        resource's new requested state, as PVE's `qm start` sets it."""
        for sid in list(self.ha_resources):
            link = self.ha_links.setdefault(sid, {'guest': None, 'mirror': None, 'purge': False})
            guest = link['guest']
            kind, _, name = sid.partition(':')
            if guest is not None and not any(g is guest for g in (self.vms if kind == 'vm' else self.cts)):
                if link['purge']:
                    self._ha_remove(sid, purge=True)
                    continue
                link['guest'] = guest = None  # resources.cfg keeps naming it
            if guest is None:
                found = self._ha_guest(kind, int(name)) if name.isdigit() else None
                if found is not None:
                    # A new guest with its VMID is HA managed from the start.
                    link['guest'] = found
                    found.ha_state = link['mirror'] = self._ha_crm_state(self.ha_resources[sid].get('state'))
                continue
            if guest.ha_state == link['mirror']:
                continue
            if guest.ha_state is None:
                # A test made the guest unmanaged.
                del self.ha_resources[sid], self.ha_links[sid]
                continue
            link['mirror'] = guest.ha_state
            if guest.ha_state in ('started', 'stopped') and self.ha_resources[sid].get('state') != 'ignored':
                self.ha_resources[sid]['state'] = guest.ha_state
        for kind, guests in (('vm', self.vms), ('ct', self.cts)):
            for guest in guests:
                sid = '{0}:{1}'.format(kind, guest.vmid)
                if guest.ha_state is None or sid in self.ha_resources:
                    continue
                self.ha_resources[sid] = {'type': kind}
                if guest.ha_state in ('started', 'stopped'):
                    self.ha_resources[sid]['state'] = guest.ha_state
                self.ha_links[sid] = {'guest': guest, 'mirror': guest.ha_state, 'purge': False}

    def _ha_remove(self, sid, purge):
        # PVE::HA::Config::delete_service_from_config: with purge, the resource leaves every
        # rule too, and a rule left without resources goes. The guest is no longer managed.
        self.ha_resources.pop(sid, None)
        link = self.ha_links.pop(sid, None)
        if link and link['guest'] is not None:
            link['guest'].ha_state = None
        if purge:
            for rid in list(self.ha_rules):
                self.ha_rules[rid]['resources'].discard(sid)
                if not self.ha_rules[rid]['resources']:
                    del self.ha_rules[rid]

    # HA resources: pve-ha-manager's API2/HA/Resources.pm (PVE 9, and PVE 8 where it differs).

    def _ha_resource_view(self, sid, exclude_group):
        out = dict(self.ha_resources[sid], sid=sid, digest=self._ha_digest(self.ha_resources))
        if exclude_group:
            out.pop('group', None)
        return out

    async def _ha_resource_list(self, v, user):
        self._ha_sync()
        migrated = self._ha_groups_migrated()
        out = []
        for sid in sorted(self.ha_resources):
            item = self._ha_resource_view(sid, migrated)
            if v.get('type') and v['type'] != item['type']:
                continue
            if item.get('group') and item['group'] not in self.ha_groups:
                item['errors'] = {'group': "group '{0}' does not exist".format(item['group'])}
            out.append(item)
        return out

    async def _ha_resource_read(self, v, user):
        self._ha_sync()
        sid = self._ha_parse_sid(v['sid'])[0]
        if sid not in self.ha_resources:
            raise die("no such resource '{0}'".format(sid))
        return self._ha_resource_view(sid, self._ha_groups_migrated())

    async def _ha_resource_create(self, v, user):
        self._ha_sync()
        self._ha_pve8_params(v, ('failback', 'auto-rebalance'))
        self.need_quorum()
        opts = dict(v)
        sid, kind, name = self._ha_parse_sid(opts.pop('sid'))
        given = opts.pop('type', None)
        if given and given != kind:
            raise die('types does not match')
        if opts.get('group') is not None and self._ha_groups_migrated():
            raise die("invalid parameter 'group': ha groups have been migrated to rules")
        if kind not in ('vm', 'ct'):
            raise die("unknown section type '{0}'".format(kind))
        # PVE/HA/Resources/PVEVM.pm and PVECT.pm: verify_name, exists.
        if not re.fullmatch(r'[1-9][0-9]+', name):
            raise die('invalid VMID')
        guest = self._ha_guest(kind, int(name))
        if guest is None:
            if self.guest(int(name)) is None:
                raise die("resource '{0}' does not exist in cluster".format(sid))
            raise die("resource '{0}' - guest with ID {1} is not a {2}".format(
                sid, name, 'VM' if kind == 'vm' else 'container'))
        if sid in self.ha_resources:
            raise die("create resource failed: resource ID '{0}' already defined".format(sid))
        # Only the options given are stored (SectionConfig's check_config); GET shows no defaults.
        self.ha_resources[sid] = dict(opts, type=kind)
        self.ha_links[sid] = {'guest': guest, 'mirror': None, 'purge': False}
        await self._ha_apply(sid)
        return None

    async def _ha_resource_update(self, v, user):
        self._ha_sync()
        self._ha_pve8_params(v, ('failback', 'auto-rebalance'))
        opts = dict(v)
        digest, delete = opts.pop('digest', None), opts.pop('delete', None)
        sid = self._ha_parse_sid(opts.pop('sid'))[0]
        group = opts.get('group')
        if group:
            if self._ha_groups_migrated():
                raise die("invalid parameter 'group': ha groups have been migrated to rules")
            if group not in self.ha_groups:
                raise die("HA group '{0}' does not exist".format(group))
        # check_service_state: a resource in the error state must be disabled first.
        guest = (self.ha_links.get(sid) or {}).get('guest')
        if guest is not None and guest.ha_state == 'error' and opts.get('state') != 'disabled':
            raise die("service '{0}' in error state, must be disabled and fixed first".format(sid))
        fail = 'update resources config failed: '
        if digest and digest != self._ha_digest(self.ha_resources):
            raise die(fail + DIGEST_CHANGED)
        if sid not in self.ha_resources:
            raise die(fail + "no such resource '{0}'".format(sid))
        entry = dict(self.ha_resources[sid], **opts)
        options = ('state', 'group', 'comment', 'failback', 'max_restart', 'max_relocate', 'auto-rebalance')
        deleted = split_list(delete)
        for key in deleted:
            if key not in options:
                raise die(fail + "no such option '{0}'".format(key))
            entry.pop(key, None)
        self.ha_resources[sid] = entry
        if 'state' in opts or 'state' in deleted:
            await self._ha_apply(sid)
        return None

    async def _ha_resource_delete(self, v, user):
        self._ha_sync()
        self._ha_pve8_params(v, ('purge',))
        sid = self._ha_parse_sid(v['sid'])[0]
        if sid not in self.ha_resources:
            raise die("cannot delete service '{0}', not HA managed!".format(sid))
        self._ha_remove(sid, purge=v.get('purge', 1))
        return None

    async def _qm_destroy(self, v, user):
        # qemu-server's destroy refuses a VM in the HA resources without purge (fakepve does
        # so only while the VM has an HA state, which an ignored resource does not give it),
        # and with purge drops its resource and its place in rules (see _ha_sync).
        vm = self.find(v['node'], v['vmid'])
        sid = 'vm:{0}'.format(vm.vmid)
        self._ha_sync()
        if sid in self.ha_resources:
            if not v.get('purge') and not (v.get('skiplock') and user != 'root@pam'):
                self._qm_check_protection(vm, "can't remove VM {0}".format(vm.vmid))
                raise die('unable to remove VM {0} - used in HA resources and purge parameter not set.'
                          .format(vm.vmid))
            self.ha_links[sid]['purge'] = bool(v.get('purge'))
        upid = await super()._qm_destroy(v, user)
        self._ha_sync()
        return upid

    async def _lxc_destroy(self, user, v):
        # pve-container's destroy, as _qm_destroy.
        ct = self._find_ct(v['node'], v['vmid'])
        sid = 'ct:{0}'.format(ct.vmid)
        self._ha_sync()
        if sid in self.ha_resources:
            if not v.get('purge'):
                self._check_protection(ct, "can't remove CT {0}".format(ct.vmid))
                self._ct_check_lock(ct)
                raise die('unable to remove CT {0} - used in HA resources and purge parameter not set.'
                          .format(ct.vmid))
            self.ha_links[sid]['purge'] = True
        upid = await super()._lxc_destroy(user, v)
        self._ha_sync()
        return upid

    # HA rules (PVE 9): pve-ha-manager's API2/HA/Rules.pm, PVE/HA/Rules.pm and its plugins.

    def _ha_rule_schema(self, method):
        """The parameters of a rules method as (plain properties, oneOf part): the schema's allOf."""
        template = '/cluster/ha/rules' + ('' if method == 'POST' else '/{rule}')
        plain, one_of = {}, None
        for part in pve_schema.load().paths[template][method]['parameters']['allOf']:
            if 'oneOf' in part:
                one_of = part
            else:
                plain.update(part.get('properties', {}))
        return plain, one_of

    def _ha_rule_params(self, method, v):
        """Check a rule's parameters as pve-common's JSONSchema does with the schema's allOf and
        its oneOf keyed by `type` (check_all_of, check_one_of), which fakepve's validate does
        not read (it accepts anything there): each part with fakepve's validate, so the
        wording is PVE's. Errors in the type's own properties are named as PVE names them,
        'oneOf[<type>].<name>'; without a valid type, only the type and the common
        properties are known."""
        plain, one_of = self._ha_rule_schema(method)
        key = one_of['type-property']
        values, errors = pve_schema.validate({'properties': plain},
                                             dict((k, x) for k, x in v.items() if k in plain))
        known = set(plain) | {key}
        kind = v.get(key)
        why = 'property is missing and it is not optional' if kind is None else \
            pve_schema.check_value(one_of['type-property-schema'], kind)[1]
        if why:
            errors[key] = why
        else:
            variant = next(b for b in one_of['oneOf'] if b['instance-type'] == kind)
            props = variant.get('properties', {})
            more, bad = pve_schema.validate({'properties': props},
                                            dict((k, x) for k, x in v.items() if k in props))
            values.update(more)
            errors.update(('oneOf[{0}].{1}'.format(kind, name), text) for name, text in bad.items())
            known |= set(props)
            values[key] = kind
        errors.update((name, NOT_IN_SCHEMA) for name in v if name not in known)
        if errors:
            raise PveError(400, 'Parameter verification failed.', errors)
        return values

    def _ha_rule_options(self, kind):
        """The options of a rule type, name -> required: its properties in the create schema."""
        variant = next(b for b in self._ha_rule_schema('POST')[1]['oneOf'] if b['instance-type'] == kind)
        return dict((name, not sch.get('optional')) for name, sch in variant['properties'].items())

    @staticmethod
    def _ha_node_priority(entry):
        # PVE::HA::Tools::parse_node_priority: a node without one has priority 0.
        node, _, priority = str(entry).partition(':')
        return node, int(priority or 0)

    def _ha_rule_decode(self, values):
        # The rule plugins' decode_value: resources a set, nodes {node: priority}.
        rule = dict(values)
        if 'resources' in rule:
            rule['resources'] = set(split_list(rule['resources']))
        if 'nodes' in rule:
            rule['nodes'] = dict(self._ha_node_priority(e) for e in split_list(rule['nodes']))
        return rule

    def _ha_assert_members(self, rule, fail):
        # Rules.pm's assert_valid_resources_param and assert_valid_nodes_param.
        if 'resources' in rule:
            if not rule['resources']:
                raise die(fail + 'no resources were specified')
            unmanaged = sorted(sid for sid in rule['resources'] if sid not in self.ha_resources)
            if unmanaged:
                raise die(fail + 'cannot use unmanaged resource(s) {0}.'.format(', '.join(unmanaged)))
        if 'nodes' in rule:
            if not rule['nodes']:
                raise die(fail + 'no nodes were specified')
            unknown = sorted(node for node in rule['nodes'] if node not in self.nodes)
            if unknown:
                raise die(fail + 'cannot use non-existent node(s) {0}.'.format(', '.join(unknown)))

    def _ha_full_rules(self, rules=None):
        """The rules and, while HA groups are left, the node-affinity rules PVE 9 makes of them
        (PVE::HA::Groups::migrate_groups_to_rules, which the API shows but does not store)."""
        rules = dict(self.ha_rules if rules is None else rules)
        members = {}
        for sid in sorted(self.ha_resources):
            group = self.ha_resources[sid].get('group')
            if group:
                members.setdefault(group, set()).add(sid)
        for group in sorted(members):
            if group not in self.ha_groups:
                continue
            settings = self.ha_groups[group]
            rule = {'type': 'node-affinity', 'resources': members[group],
                    'nodes': dict(self._ha_node_priority(e) for e in settings['nodes']),
                    'comment': settings.get('comment') or "Generated from HA group '{0}'.".format(group)}
            if settings.get('restricted') is not None:
                rule['strict'] = settings['restricted']
            rules['ha-group-' + group] = rule
        return rules

    def _ha_rule_errors(self, rules):
        """PVE::HA::Rules->check_feasibility: {rule id: {option: [messages]}} for the enabled
        rules, checks in PVE's order (node affinity, resource affinity, then between them)."""
        errors = {}

        def blame(rid, message):
            errors.setdefault(rid, {}).setdefault('resources', []).append(message)
        enabled = dict((rid, r) for rid, r in rules.items() if 'disable' not in r)
        node_rules = dict((rid, r) for rid, r in enabled.items() if r['type'] == 'node-affinity')
        res_rules = dict((rid, r) for rid, r in enabled.items() if r['type'] == 'resource-affinity')
        positive = dict((rid, r) for rid, r in res_rules.items() if r['affinity'] == 'positive')
        negative = dict((rid, r) for rid, r in res_rules.items() if r['affinity'] == 'negative')
        # NodeAffinity.pm check_single_resource_reference.
        users = {}
        for rid in sorted(node_rules):
            for sid in node_rules[rid]['resources']:
                users.setdefault(sid, []).append(rid)
        for rid, sid in sorted((rid, sid) for sid, rids in users.items() if len(rids) > 1 for rid in rids):
            blame(rid, "resource '{0}' is already used in another node affinity rule".format(sid))
        # ResourceAffinity.pm: resources counts, positive against negative.
        for rid in sorted(res_rules):
            if len(res_rules[rid]['resources']) < 2:
                blame(rid, 'rule is ineffective as there are less than two resources')
        for rid in sorted(negative):
            if len(negative[rid]['resources']) > len(self.nodes):
                blame(rid, 'rule defines more resources than available nodes')
        together = self._ha_disjoint(positive)
        conflicts = []
        for ids, resources in together:
            for nid in sorted(negative):
                if len(resources & negative[nid]['resources']) >= 2:
                    conflicts += [('negative', nid)] + [('positive', pid) for pid in ids]
        for side, rid in sorted(conflicts):
            blame(rid, 'rule shares two or more resources with a {0} resource affinity rule'.format(
                'positive' if side == 'negative' else 'negative'))
        # Rules.pm: between node affinity and resource affinity rules.
        conflicts = []
        for rid in sorted(res_rules):
            paired = [nid for nid in sorted(node_rules) if res_rules[rid]['resources'] & node_rules[nid]['resources']]
            if any(len(set(node_rules[nid]['nodes'].values())) > 1 for nid in paired):
                conflicts += [('resource-affinity', rid)] + [('node-affinity', nid) for nid in paired]
        for side, rid in sorted(conflicts):
            blame(rid, 'resources are in node affinity rules with multiple priorities' if side == 'resource-affinity'
                  else 'resources are in a resource affinity rule and cannot be in a node affinity rule with'
                       ' multiple priorities')
        conflicts = []
        for ids, resources in together:
            paired = [nid for nid in sorted(node_rules) if resources & node_rules[nid]['resources']]
            if len(paired) > 1:
                conflicts += [('positive', pid) for pid in ids] + [('node-affinity', nid) for nid in paired]
        for side, rid in sorted(conflicts):
            blame(rid, 'resources are in multiple node affinity rules' if side == 'positive'
                  else 'at least one resource is in a positive resource affinity rule and there are other'
                       ' resources in at least one other node affinity rule already')
        conflicts = []
        for rid in sorted(negative):
            allowed, located, paired = set(), set(), []
            for nid in sorted(node_rules):
                # Only placing (positive) node affinity restricts the nodes.
                if node_rules[nid].get('affinity', 'positive') != 'positive':
                    continue
                common = negative[rid]['resources'] & node_rules[nid]['resources']
                if common:
                    located |= common
                    allowed |= set(node_rules[nid]['nodes'])
                    paired.append(nid)
            if len(allowed) < len(located):
                conflicts += [('negative', rid)] + [('node-affinity', nid) for nid in paired]
        for side, rid in sorted(conflicts):
            blame(rid, 'two or more resources are restricted to less nodes than available to the resources'
                  if side == 'negative' else 'at least one resource is in a negative resource affinity rule and'
                                             ' this rule would restrict these to less nodes than available to'
                                             ' the resources')
        return errors

    @staticmethod
    def _ha_disjoint(rules):
        # Rules/Helpers.pm find_disjoint_rules_resource_sets: rules joined by shared resources,
        # as [(rule ids, their resources)].
        out = []
        for rid in sorted(rules, key=lambda r: (min(rules[r]['resources'] or {''}), r)):
            resources = rules[rid]['resources']
            for ids, members in out:
                if members & resources:
                    ids.append(rid)
                    members |= resources
                    break
            else:
                out.append(([rid], set(resources)))
        return out

    def _ha_assert_feasible(self, rules, rid, fail):
        # Rules.pm's assert_feasibility raises a 400 'Rule ... is invalid.' with the rule's
        # errors, but inside lock_ha_domain, which dies with "$errmsg: $err": the exception
        # becomes text (PVE::Exception's stringify) and the answer a 500.
        found = self._ha_rule_errors(self._ha_full_rules(rules)).get(rid)
        if found:
            raise die('{0}400 Rule \'{1}\' is invalid.\n{2}'.format(fail, rid, '\n'.join(
                '{0}: {1}'.format(opt, ', '.join(found[opt])) for opt in sorted(found))))

    def _ha_rule_view(self, rules, rid, errors):
        # Rules.pm's get_api_ha_rule, with set_rule_defaults (a type's optional properties
        # with a default, from the schema).
        rule = rules[rid]
        out = dict((k, x) for k, x in rule.items() if k not in ('resources', 'nodes'))
        variant = next(b for b in self._ha_rule_schema('POST')[1]['oneOf'] if b['instance-type'] == rule['type'])
        for name, sch in variant['properties'].items():
            if sch.get('optional') and sch.get('default') and name not in out:
                out[name] = sch['default']
        out.update(rule=rid, digest=self._ha_digest([[r, self.ha_rules[r]] for r in self.ha_rules]),
                   order=list(rules).index(rid) + 1, resources=','.join(sorted(rule['resources'])))
        if 'nodes' in rule:
            out['nodes'] = ','.join('{0}:{1}'.format(n, p) if p else n for n, p in sorted(rule['nodes'].items()))
        if errors.get(rid):
            out['errors'] = errors[rid]
        return out

    async def _ha_rule_list(self, v, user):
        self._ha_sync()
        rules = self._ha_full_rules()
        errors = self._ha_rule_errors(rules)
        return [self._ha_rule_view(rules, rid, errors) for rid in rules
                if (not v.get('type') or rules[rid]['type'] == v['type'])
                and (v.get('resource') is None or v['resource'] in rules[rid]['resources'])]

    async def _ha_rule_read(self, v, user):
        self._ha_sync()
        rules = self._ha_full_rules()
        if v['rule'] not in rules:
            raise die("no such ha rule '{0}'".format(v['rule']))
        return self._ha_rule_view(rules, v['rule'], self._ha_rule_errors(rules))

    async def _ha_rule_create(self, v, user):
        self._ha_sync()
        values = self._ha_rule_params('POST', v)
        self.need_quorum()
        if not self._ha_groups_migrated():
            raise die('cannot create ha rule: ha groups have not been migrated yet')
        rid = values.pop('rule')
        if not values.get('disable'):
            values.pop('disable', None)
        rule = self._ha_rule_decode(values)
        fail = 'create ha rule failed: '
        if rid in self.ha_rules:
            raise die(fail + "HA rule '{0}' already defined".format(rid))
        self._ha_assert_members(rule, fail)
        rules = dict(self.ha_rules)
        rules[rid] = rule
        self._ha_assert_feasible(rules, rid, fail)
        self.ha_rules = rules
        return None

    async def _ha_rule_update(self, v, user):
        self._ha_sync()
        values = self._ha_rule_params('PUT', v)
        if not self._ha_groups_migrated():
            raise die('cannot update ha rule: ha groups have not been migrated yet')
        rid = values.pop('rule')
        digest, delete = values.pop('digest', None), values.pop('delete', None)
        if not values.get('disable'):
            values.pop('disable', None)
        fail = 'update HA rules failed: '
        if digest and digest != self._ha_digest([[r, self.ha_rules[r]] for r in self.ha_rules]):
            raise die(fail + DIGEST_CHANGED)
        if rid not in self.ha_rules:
            raise die(fail + "HA rule '{0}' does not exist".format(rid))
        current = self.ha_rules[rid]
        # SectionConfig's check_value takes the type only when it is the rule's own.
        if values.pop('type') != current['type']:
            raise die(fail + "unexpected property 'type'")
        new = self._ha_rule_decode(values)
        self._ha_assert_members(new, fail)
        rule = dict(current, resources=set(current['resources']))
        options = self._ha_rule_options(current['type'])
        for key in split_list(delete):
            # SectionConfig::delete_from_config.
            if key not in options:
                raise die(fail + "no such option '{0}'".format(key))
            if options[key]:
                raise die(fail + "unable to delete required option '{0}'".format(key))
            if key in new:
                raise die(fail + "cannot set and delete property '{0}' at the same time!".format(key))
            rule.pop(key, None)
        rule.update(new)
        rules = dict(self.ha_rules)
        rules[rid] = rule
        self._ha_assert_feasible(rules, rid, fail)
        self.ha_rules = rules
        return None

    async def _ha_rule_delete(self, v, user):
        self.ha_rules.pop(v['rule'], None)
        return None

    # HA groups (PVE 8; on PVE 9 until they are migrated): API2/HA/Groups.pm.

    def _ha_groups_gone(self, what):
        if self._ha_groups_migrated():
            raise die('cannot {0}: ha groups have been migrated to rules'.format(what))

    def _ha_group_view(self, group):
        out = dict(self.ha_groups[group], group=group, type='group', digest=self._ha_digest(self.ha_groups))
        out['nodes'] = ','.join(out['nodes'])
        return out

    async def _ha_group_list(self, v, user):
        self._ha_groups_gone('index groups')
        return [self._ha_group_view(group) for group in sorted(self.ha_groups)]

    async def _ha_group_read(self, v, user):
        self._ha_groups_gone('read group')
        if v['group'] not in self.ha_groups:
            raise die("no such ha group '{0}'".format(v['group']))
        return self._ha_group_view(v['group'])

    async def _ha_group_create(self, v, user):
        self._ha_groups_gone('create group')
        self.need_quorum()
        opts = dict(v)
        group = opts.pop('group')
        opts.pop('type', None)  # the schema allows only 'group'
        opts['nodes'] = list(dict.fromkeys(split_list(opts['nodes'])))
        if group in self.ha_groups:
            raise die("create ha group failed: ha group ID '{0}' already defined".format(group))
        self.ha_groups[group] = opts
        return None

    async def _ha_group_update(self, v, user):
        self._ha_groups_gone('update group')
        opts = dict(v)
        digest, delete = opts.pop('digest', None), opts.pop('delete', None)
        group = opts.pop('group')
        fail = 'update ha group failed: '
        if digest and digest != self._ha_digest(self.ha_groups):
            raise die(fail + DIGEST_CHANGED)
        if group not in self.ha_groups:
            raise die(fail + "no such ha group '{0}'".format(group))
        if 'nodes' in opts:
            opts['nodes'] = list(dict.fromkeys(split_list(opts['nodes'])))
        entry = dict(self.ha_groups[group], **opts)
        for key in split_list(delete):
            if key not in ('nodes', 'comment', 'nofailback', 'restricted'):
                raise die(fail + "no such option '{0}'".format(key))
            if key == 'nodes':
                raise die(fail + "unable to delete required option 'nodes'")
            entry.pop(key, None)
        self.ha_groups[group] = entry
        return None

    async def _ha_group_delete(self, v, user):
        self._ha_groups_gone('delete group')
        for sid in sorted(self.ha_resources):
            if self.ha_resources[sid].get('group') == v['group']:
                raise die("delete ha group failed: ha group is used by service '{0}'".format(sid))
        self.ha_groups.pop(v['group'], None)
        return None

    def ha_configs(self):
        """The HA configs as the API shows them (without digests): {resources, rules, groups}."""
        self._ha_sync()
        rules = dict(self.ha_rules)
        errors = self._ha_rule_errors(rules)
        views = [self._ha_rule_view(rules, rid, errors) for rid in rules]
        for view in views:
            view.pop('digest')
        return {'resources': [dict(self.ha_resources[sid], sid=sid) for sid in sorted(self.ha_resources)],
                'rules': views,
                'groups': [dict(self.ha_groups[g], group=g, type='group', nodes=','.join(self.ha_groups[g]['nodes']))
                           for g in sorted(self.ha_groups)]}

    # ------------------------------------------------------------ VM creation

    async def _qm_create(self, v, user):
        # Gap: fakepve neither checks Mapping.Use for hostpci mappings nor refuses raw
        # host devices to non-root users; qemu-server's check_hostpci_perm does.
        for key in sorted(k for k in v if re.fullmatch(r'hostpci\d+', k)):
            first, props = split_drive(v[key])
            mapping = props.get('mapping')
            if mapping:
                self.require(user, '/mapping/pci/' + mapping, 'Mapping.Use')
            elif user != 'root@pam':
                raise die("only root can set '{0}' config for non-mapped devices".format(key))
        upid = await super()._qm_create(v, user)
        if self.lose_create_answers > 0:
            # A proxy that loses the answer after the node did the work (pveproxy's 595).
            self.lose_create_answers -= 1
            raise PveError(595, 'No route to host')
        return upid

    def _qm_new_drive(self, vmid, key, value, default):
        # Gap: fakepve keeps import-from in the config and gives the disk size 0. PVE
        # imports the source (which must exist on the VM's node), gives the disk the
        # source's size, and drops import-from.
        volume, props = split_drive(value)
        source = props.get('import-from')
        if not source:
            return super()._qm_new_drive(vmid, key, value, default)
        sid, name = volume_ref(source)
        found = self._volumes(sid).get(name) if sid in self.storages else None
        vm = self.vm(vmid)
        store = self.storages.get(sid, {})
        if found is not None and not store.get('shared') and store.get('path') and vm is not None:
            if name not in self.node_volumes.get((sid, vm.node), set()):
                found = None
        if found is None:
            raise die("unable to import '{0}': volume does not exist".format(source))
        target = volume_ref(volume)[0] or default
        size = int(found.get('size') or 0)
        volid, _fmt = self._qm_alloc(target, vmid, props.pop('format', None), size)
        props.pop('import-from')
        props['size'] = format_size(size) if size else '0'
        return join_drive(volid, props), [volid]

    async def _do_start(self, vm, user, p):
        # Gap: fakepve has no task that ends "WARNINGS: N"; a VM's start_warnings
        # (a list of WARN: lines) makes its start end so, as PVE's does.
        warnings = getattr(vm, 'start_warnings', None)
        if warnings:
            upid = await self._do_start_checked(vm, user, p)
            record = self.tasks[upid]
            if record['status'] == 'stopped' and record['exitstatus'] == 'OK':
                record['exitstatus'] = 'WARNINGS: {0}'.format(len(warnings))
                record['log'] = record['log'][:-1] + list(warnings) + ['TASK WARNINGS: {0}'.format(len(warnings))]
            return upid
        return await self._do_start_checked(vm, user, p)

    async def _do_start_checked(self, vm, user, p):
        # Gap: fakepve starts a VM whose PCI mapping does not exist; PVE's start fails.
        for key in sorted(k for k in vm.config if re.fullmatch(r'hostpci\d+', k)):
            mapping = split_drive(vm.config[key])[1].get('mapping')
            if mapping and not self._mapping_on_node(mapping, vm.node):
                message = "PCI device mapping not found for '{0}'".format(mapping)

                async def body():
                    raise TaskError(message)
                return await self.task(vm.node, 'qmstart', vm.vmid, user, body, vm=vm)
        return await super()._do_start(vm, user, p)

    async def _do_shutdown(self, vm, user, p):
        # Gap: fakepve answers 500 "VM not running"; PVE's shutdown task ends OK at once.
        if vm.status != 'running':
            async def body():
                return None
            return await self.task(vm.node, 'qmshutdown', vm.vmid, user, body, vm=vm)
        return await super()._do_shutdown(vm, user, p)

    async def _apply_config(self, vm, user, p):
        # Gap: fakepve keeps a deleted disk pending on a running VM and never frees its
        # volume. PVE (vmconfig_delete_or_detach_drive, with the default hotplug
        # network,disk,usb) unplugs a SCSI/VirtIO/SATA disk at once and keeps a volume
        # the VM owns as unusedN; deleting unusedN frees the volume (vdisk_free).
        deletes = [k for k in str(p.get('delete', '') or '').split(',') if k]
        drives = dict((k, str(vm.config[k])) for k in deletes
                      if re.fullmatch(r'(scsi|virtio|sata)\d+', k) and k in vm.config
                      and 'media=cdrom' not in str(vm.config[k]))
        unused = dict((k, str(vm.config[k])) for k in deletes
                      if re.fullmatch(r'unused\d+', k) and k in vm.config)
        await super()._apply_config(vm, user, p)
        for key, value in drives.items():
            vm.pending.pop(key, None)
            vm.config.pop(key, None)
            volid = split_drive(value)[0]
            owner = re.search(r'(?:^|[:/])(?:vm|base)-(\d+)-', volid)
            if owner and int(owner.group(1)) == vm.vmid:
                n = 0
                while 'unused{0}'.format(n) in vm.config:
                    n += 1
                vm.config['unused{0}'.format(n)] = volid
        for key, value in unused.items():
            vm.pending.pop(key, None)
            vm.config.pop(key, None)
            self._qm_free(split_drive(value)[0])

    @staticmethod
    def _vm_maxdisk(vm):
        # Gap: fakepve reports the first drive key's size (the EFI disk); PVE reports the boot disk.
        boot = str(vm.config.get('boot', ''))
        order = boot[len('order='):].split(';') if boot.startswith('order=') else []
        for key in order:
            value = str(vm.config.get(key, ''))
            if 'media=cdrom' in value:
                continue
            size = split_drive(value)[1].get('size') if value else None
            if size:
                return size_bytes(size) or 0
        return FakePve._vm_maxdisk(vm)

    # ------------------------------------------------------------- downloads

    async def _download_url(self, request):
        # fakepve's own handler, with these gaps filled: the Sys.AccessNetwork
        # alternative is honoured; the URL is fetched (loopback only) when asked, and
        # the file's size is the volume's; a non-shared storage keeps each node's files
        # apart; and an existing file is refused, as PVE does without a checksum.
        from fakepve.server import USER, int_param, ok, params
        node, name = request.match_info['node'], request.match_info['storage']
        store = self._active_store(name, node)
        user = request[USER]
        self.require(user, '/storage/' + name, 'Datastore.AllocateTemplate')
        if not (self.allowed(user, '/', 'Sys.Audit') and self.allowed(user, '/', 'Sys.Modify')) \
                and not self.allowed(user, '/nodes/' + node, 'Sys.AccessNetwork'):
            raise PveError(403, 'Permission check failed (/, Sys.Audit)')
        p = await params(request)
        size = int_param(p, 'size', 1024 ** 2, minimum=0)
        p = self._verify(request, p, drop=('size',))
        self._need_file_storage(store, "can't upload to storage type '{0}', not a file based storage!")
        content = p['content']
        if content not in split_list(store.get('content')):
            raise die("storage '{0}' is not configured for content-type '{1}'".format(name, content))
        url, filename = p['url'], p['filename']

        async def body():
            got = await self._fetch(url) if self.fetch_downloads else size
            self.store_on(node, name, filename, got, content)
            return "download of '{0}' to '{1}' finished".format(url, filename)
        return ok(await self.task(node, 'download', filename, user, body,
                                  log=['downloading {0} to {1}'.format(url, filename)]))

    def store_on(self, node, storage, name, size, content):
        """Put a file on a storage as seen from a node (each node has its own local storage)."""
        store = self.storages[storage]
        volname = '{0}/{1}'.format(content, name)
        local = not store.get('shared') and node is not None
        exists = (volname in self.node_volumes.get((storage, node), set())) if local \
            else volname in store.get('volumes', {})
        if exists:
            raise TaskError("refusing to override existing file '{0}/{1}/{2}'".format(
                store.get('path', '/var/lib/vz'), content, name))
        if volname not in store.get('volumes', {}):
            self.store_file(storage, name, size, content)
        if local:
            self.node_volumes.setdefault((storage, node), set()).add(volname)

    async def _fetch(self, url):
        if not is_loopback_url(url):
            raise TaskError('fakepve launcher: refusing to fetch {0}: not a loopback address'.format(url))
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(url) as answer:
                    if answer.status != 200:
                        raise TaskError('download failed: HTTP {0} for {1}'.format(answer.status, url))
                    return len(await answer.read())
        except aiohttp.ClientError as exc:
            raise TaskError('download failed: {0}'.format(exc)) from None

    async def _content_list(self, v, user):
        # Gap (see store_file): a non-shared storage shows only this node's import files.
        out = await super()._content_list(v, user)
        store = self.storages.get(v['storage'], {})
        if store.get('shared') or not store.get('path'):
            return out
        mine = self.node_volumes.get((v['storage'], v['node']), set())
        prefix = v['storage'] + ':'
        return [item for item in out if item.get('content') != 'import' or item['volid'][len(prefix):] in mine]

    # ------------------------------------------------------------ permissions

    async def _permissions(self, v, user):
        # Gap: with ?path=, fakepve only filters its ACL entries (no inheritance through
        # pools or parents). PVE answers the effective privileges on exactly that path.
        path = v.get('path')
        who = v.get('userid') or user
        if path is None or self.acl is None or who.split('!')[0] == 'root@pam':
            return await super()._permissions(v, user)
        held = [priv for priv in shapes.PRIVILEGES if self.allowed(who, path, priv)]
        return {path: dict.fromkeys(held, 1)} if held else {}


class Control(object):
    """The commands the Rust harness sends, one JSON object per line."""

    def __init__(self, pve):
        self.pve = pve

    async def run(self, cmd):
        name = cmd.pop('cmd')
        return await getattr(self, 'do_' + name)(**cmd)

    async def do_fail(self, method, suffix, error=None, status=None, message=None, times=None):
        self.pve.fail(method, suffix, status=status, message=message, error=error, times=times)

    async def do_clear_failures(self):
        self.pve.failures.clear()

    async def do_hold_config_lock(self, vmid):
        await self.pve.hold_config_lock(vmid, None)

    async def do_release_config_lock(self, vmid):
        self.pve.release_config_lock(vmid)

    async def do_set_node_offline(self, node, offline=True):
        self.pve.set_node_offline(node, offline)

    async def do_add_vm(self, vmid, name, node='pve1', status='stopped', config=None, pool=None):
        vm = self.pve.add_vm(vmid, name, node=node, status=status, config=config or {}, pool=pool)
        if pool:
            self.pve._pool_join(pool, vmid)
        return vm.vmid

    async def do_vm_set(self, vmid, **attrs):
        vm = self.pve.vm(vmid)
        for key, value in attrs.items():
            setattr(vm, key, value)

    async def do_requests(self, since=0):
        reqs = self.pve.requests
        return {'total': len(reqs), 'requests': [[m, p, b.decode('utf-8', 'replace')] for m, p, b in reqs[since:]]}

    async def do_lose_create_answers(self, count):
        self.pve.lose_create_answers = count

    async def do_reset_connections(self, method, suffix, times=1, contains=''):
        self.pve.resets[(method, suffix, contains)] = times

    async def do_slow_task(self, type, secs):
        self.pve.slow_tasks[type] = secs

    async def do_set_version(self, version):
        self.pve.version = version
        self.pve.release_version = '.'.join(version.split('.')[:2])

    async def do_hold_after(self, count):
        """Serve `count` more requests, then hold every later one (see _answer)."""
        self.pve.gate = {'after': count, 'seen': 0, 'held': [], 'serve_first': False,
                         'release': asyncio.Event(), 'first_done': asyncio.Event()}

    async def do_hold_at(self, method, suffix):
        """Serve every request until one is `method` on a path ending in `suffix`, then hold it
        and every later one (see _answer)."""
        self.pve.gate = {'after': None, 'at': (method, suffix), 'seen': 0, 'held': [],
                         'serve_first': False, 'release': asyncio.Event(),
                         'first_done': asyncio.Event()}

    async def do_held(self):
        """The requests the gate holds, as 'METHOD /path'."""
        gate = self.pve.gate
        return {'held': list(gate['held']) if gate else []}

    async def do_release_held(self, serve_first=False):
        """Open the gate: serve the first held request (when asked) and wait for it; drop the rest."""
        gate, self.pve.gate = self.pve.gate, None
        if gate is None:
            return
        gate['serve_first'] = serve_first
        gate['release'].set()
        if gate['held']:
            await asyncio.wait_for(gate['first_done'].wait(), 30)

    async def do_grant(self, user, path, privs):
        self.pve.grant(user, path, *privs)

    async def do_set_host_memory(self, node, available):
        self.pve.host_memory[node] = int(available)

    async def do_set_bridges(self, node, names):
        self.pve.bridges[node] = list(names)

    async def do_ha(self):
        """The HA resources, rules and groups the fake holds: {'resources': [...], 'rules': [...],
        'groups': [...]}, each item as GET /cluster/ha/<kind> shows it, without `digest`."""
        return self.pve.ha_configs()

    async def do_add_file(self, storage, name, node=None, size=1048576, content='import'):
        self.pve.store_on(node, storage, name, size, content)


def build(cfg):
    pve = TalosprovFake(user=cfg.get('user', 'root@pam'), password=cfg.get('password', 'secret'),
                        host=cfg['host'], port=cfg.get('port', 0), fetch_downloads=cfg.get('fetch_downloads', False))
    pve.time_scale = cfg.get('time_scale', 0)
    for token, secret in cfg.get('tokens', {}).items():
        pve.apitokens[token] = secret
    for user, path, privs in cfg.get('grants', []):
        pve.grant(user, path, *privs)
    for node in cfg.get('nodes', []):
        if node not in pve.nodes:
            pve.add_node(node)
    for node, names in cfg.get('bridges', {}).items():
        pve.bridges[node] = list(names)
    for name, opts in cfg.get('storages', {}).items():
        store = pve.storages.setdefault(name, {'type': 'dir', 'active': 1, 'files': set(),
                                               'path': '/mnt/pve/' + name, 'avail': 500 * 1024 ** 3})
        store.update(opts)
    return pve


async def main():
    cfg = json.loads(sys.argv[1])
    pve = build(cfg)
    await pve.start(cfg['cert'], cfg['key'])
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    control = Control(pve)

    def reader():
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                result = asyncio.run_coroutine_threadsafe(control.run(json.loads(line)), loop).result(60)
                answer = {'ok': True, 'result': result}
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
                answer = {'ok': False, 'error': '{0}: {1}'.format(type(exc).__name__, exc)}
            sys.stdout.write(json.dumps(answer) + '\n')
            sys.stdout.flush()
        loop.call_soon_threadsafe(done.set)

    sys.stdout.write(json.dumps({'url': pve.url}) + '\n')
    sys.stdout.flush()
    threading.Thread(target=reader, name='control', daemon=True).start()
    await done.wait()
    await pve.stop()


if __name__ == '__main__':
    asyncio.run(main())
