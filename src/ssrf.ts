// Refuses upstream and webhook targets in private, loopback, link-local and other non-public ranges (SSRF).
import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import { BlockList, isIP, type TcpNetConnectOpts } from 'node:net'
import { buildConnector } from 'undici'

const blocked = new BlockList()
// IPv4 ranges that are never a public API: RFC 1918, loopback, link-local (cloud metadata lives at
// 169.254.169.254), CGNAT, "this network", IETF protocol assignments, benchmarking, documentation, the
// deprecated 6to4 relay anycast, multicast and reserved (IANA's IPv4 special-purpose registry).
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  blocked.addSubnet(net, prefix, 'ipv4')
}

// IPv6: only global unicast (2000::/3) can be a public API. Everything outside it is refused whole: loopback
// and unspecified, IPv4-compatible ::/96, IPv4-mapped ::ffff:0:0/96 and IPv4-translated ::ffff:0:0:0/96
// (a dual-stack or SIIT path delivers them to the embedded IPv4 host, 127.0.0.1 included), NAT64
// 64:ff9b::/96 and 64:ff9b:1::/48 (a translator forwards them to the embedded IPv4 address), discard-only
// 100::/64, segment-routing 5f00::/16, unique-local fc00::/7, link- and site-local fe80::/10 and fec0::/10,
// multicast ff00::/8, and whatever IANA has not allocated yet.
const globalUnicast = new BlockList()
globalUnicast.addSubnet('2000::', 3, 'ipv6')
// Inside 2000::/3, IANA's special-purpose blocks that are not a public API: the IETF protocol assignments
// 2001::/23 (Teredo 2001::/32 embeds an IPv4 server and client, plus benchmarking, ORCHID, AMT, AS112),
// documentation 2001:db8::/32 and 3fff::/20, and 6to4 2002::/16 (2002:7f00:1:: is 127.0.0.1's).
const specialInGlobal = new BlockList()
for (const [net, prefix] of [
  ['2001::', 23],
  ['2001:db8::', 32],
  ['2002::', 16],
  ['3fff::', 20],
] as const) {
  specialInGlobal.addSubnet(net, prefix, 'ipv6')
}

export function isPrivateAddress(ip: string): boolean {
  const family = isIP(ip)
  if (family === 4) return blocked.check(ip, 'ipv4')
  // Lists asked only about IPv6 text: node's BlockList matches plain IPv4 addresses against mapped subnets.
  if (family === 6) return !globalUnicast.check(ip, 'ipv6') || specialInGlobal.check(ip, 'ipv6')
  return true
}

export type TargetCheck =
  | { ok: true; url: URL }
  | {
      ok: false
      reason: 'invalid_url' | 'unsupported_scheme' | 'private_target' | 'unresolvable_host'
      message: string
    }

export interface TargetPolicy {
  allowPrivate: boolean
  /** Allowed URL schemes; webhooks may require https. */
  schemes?: readonly string[]
}

/** Validates a URL's shape and that every address its host resolves to is public (unless allowed). */
export async function checkTargetUrl(raw: string, policy: TargetPolicy): Promise<TargetCheck> {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { ok: false, reason: 'invalid_url', message: 'must be an absolute http(s) URL' }
  }
  const schemes = policy.schemes ?? ['http:', 'https:']
  if (!schemes.includes(url.protocol)) {
    return { ok: false, reason: 'unsupported_scheme', message: `scheme must be ${schemes.join(' or ')}` }
  }
  if (url.username || url.password) {
    return {
      ok: false,
      reason: 'invalid_url',
      message: 'credentials in the URL are not allowed; use upstream_headers',
    }
  }
  if (policy.allowPrivate) return { ok: true, url }
  const host = url.hostname.replace(/^\[|\]$/g, '')
  const addresses = isIP(host) ? [host] : await resolveAll(host)
  if (addresses === null) return { ok: false, reason: 'unresolvable_host', message: `cannot resolve ${host}` }
  if (addresses.some(isPrivateAddress)) {
    return {
      ok: false,
      reason: 'private_target',
      message: 'targets in private, loopback or link-local ranges are refused',
    }
  }
  return { ok: true, url }
}

function resolveAll(host: string): Promise<string[] | null> {
  return new Promise((resolve) => {
    dnsLookup(host, { all: true }, (err, addresses: LookupAddress[]) => {
      resolve(err || addresses.length === 0 ? null : addresses.map((a) => a.address))
    })
  })
}

type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void

/**
 * A dns.lookup replacement for outgoing sockets: DNS may change after a target was accepted, so the
 * address actually connected to is checked at connect time too.
 */
export function guardedLookup(hostname: string, options: object, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
    if (err) return callback(err, [])
    const bad = addresses.find((a) => isPrivateAddress(a.address))
    if (bad) {
      const e = new Error(`refused to connect to private address ${bad.address}`) as NodeJS.ErrnoException
      e.code = 'ERR_TOLLGATE_PRIVATE_TARGET'
      return callback(e, [])
    }
    if ((options as { all?: boolean }).all) return callback(null, addresses)
    const first = addresses[0]!
    callback(null, first.address, first.family)
  })
}

/**
 * An undici connector for outgoing sockets (upstreams, webhooks). guardedLookup checks every address a host
 * name resolves to at connect time (DNS may have changed since the target was accepted), but net.connect
 * never calls lookup for an IP literal: those are checked here. Once per socket, not per request.
 */
export function guardedConnector(
  timeoutMs: number,
  socketOptions?: Pick<TcpNetConnectOpts, 'onread'>,
): buildConnector.connector {
  const connect = buildConnector({ ...socketOptions, timeout: timeoutMs, lookup: guardedLookup })
  return (options, callback) => {
    const host = options.hostname.charCodeAt(0) === 91 ? options.hostname.slice(1, -1) : options.hostname
    if (isIP(host) !== 0 && isPrivateAddress(host)) {
      const err = new Error(`refused to connect to private address ${host}`) as NodeJS.ErrnoException
      // Same code as guardedLookup's refusal, so both reach the caller as one outcome.
      err.code = 'ERR_TOLLGATE_PRIVATE_TARGET'
      callback(err, null)
      return
    }
    connect(options, callback)
  }
}
