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
import urllib.parse

import aiohttp
from fakepve import FakePve, PveError, TaskError
from fakepve import shapes
from fakepve.lxc import SIZE_UNITS, format_size
from fakepve.qemu import join_drive, split_drive, volume_ref
from fakepve.routing import die, split_list


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
