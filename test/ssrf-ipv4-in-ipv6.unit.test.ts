import { describe, expect, it } from 'vitest'
import { checkTargetUrl, guardedConnector, isPrivateAddress } from '../src/ssrf.ts'

// IPv4 addresses written as IPv6 (mapped ::ffff:0:0/96 and compatible ::/96) reach the IPv4 host.
const EMBEDDED_IPV4 = [
  '::ffff:127.0.0.1',
  '::ffff:7f00:1',
  '::FFFF:7F00:0001',
  '0:0:0:0:0:ffff:7f00:1',
  '0000:0000:0000:0000:0000:ffff:a9fe:a9fe', // 169.254.169.254, cloud metadata
  '::ffff:a00:1', // 10.0.0.1
  '::ffff:8.8.8.8', // public, but nothing needs to name it this way
  '::127.0.0.1',
  '::7f00:1',
  '::a9fe:a9fe',
  '::',
]

// IANA's IPv6 special-purpose registry: every block that embeds an IPv4 address or is not globally reachable.
const SPECIAL_IPV6: Array<[string, string]> = [
  ['::ffff:0:7f00:1', 'IPv4-translated ::ffff:0:0:0/96 (127.0.0.1)'],
  ['::ffff:0:a9fe:a9fe', 'IPv4-translated ::ffff:0:0:0/96 (169.254.169.254)'],
  ['2002:7f00:1::1', '6to4 2002::/16 (127.0.0.1)'],
  ['2002:a9fe:a9fe::', '6to4 2002::/16 (169.254.169.254)'],
  ['2001::1', 'Teredo 2001::/32'],
  ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'Teredo 2001::/32 (obfuscated 127.0.0.1 client)'],
  ['64:ff9b::7f00:1', 'NAT64 64:ff9b::/96 (127.0.0.1)'],
  ['64:ff9b::a9fe:a9fe', 'NAT64 64:ff9b::/96 (169.254.169.254)'],
  ['64:ff9b:1::7f00:1', 'local NAT64 64:ff9b:1::/48'],
  ['100::1', 'discard-only 100::/64'],
  ['2001:2::1', 'benchmarking 2001:2::/48'],
  ['2001:10::1', 'ORCHID 2001:10::/28'],
  ['2001:20::1', 'ORCHIDv2 2001:20::/28'],
  ['2001:db8::1', 'documentation 2001:db8::/32'],
  ['3fff::1', 'documentation 3fff::/20'],
  ['5f00::1', 'segment routing 5f00::/16'],
  ['fc00::1', 'unique local fc00::/7'],
  ['fe80::1', 'link-local fe80::/10'],
  ['fec0::1', 'site-local fec0::/10'],
  ['ff02::1', 'multicast ff00::/8'],
  ['::1', 'loopback'],
  ['::', 'unspecified'],
  ['::1:0:0:1', 'reserved ::/8'],
  ['4000::1', 'unallocated (outside 2000::/3)'],
]

describe('IANA IPv6 special-purpose ranges are refused', () => {
  it.each(SPECIAL_IPV6)('%s: %s', async (ip) => {
    expect(isPrivateAddress(ip)).toBe(true)
    expect(await checkTargetUrl(`http://[${ip}]:8080/x`, { allowPrivate: false })).toMatchObject({
      ok: false,
      reason: 'private_target',
    })
  })

  it('refuses to open a socket to any of them at connect time', async () => {
    const connect = guardedConnector(1000)
    for (const [ip] of SPECIAL_IPV6) {
      const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
        connect(
          { hostname: `[${ip}]`, host: `[${ip}]:80`, protocol: 'http:', port: '80' },
          (...args: unknown[]) => resolve(args[0] as NodeJS.ErrnoException | null),
        )
      })
      expect(err?.code, ip).toBe('ERR_TOLLGATE_PRIVATE_TARGET')
    }
  })
})

describe('IPv4 embedded in IPv6 is refused', () => {
  it('flags ::/96 and ::ffff:0:0/96 in every notation', () => {
    for (const ip of EMBEDDED_IPV4) expect(isPrivateAddress(ip), ip).toBe(true)
  })

  it('still lets public IPv6 through', () => {
    for (const ip of ['2606:4700:4700::1111', '2001:4860:4860::8888', '2a00:1450:4001::1', '2001:200::1']) {
      expect(isPrivateAddress(ip), ip).toBe(false)
    }
  })

  it('refuses the bracketed URL forms as upstream or webhook targets', async () => {
    for (const host of ['[::ffff:7f00:1]', '[::ffff:127.0.0.1]', '[::127.0.0.1]', '[::7f00:1]']) {
      expect(await checkTargetUrl(`http://${host}:8080/x`, { allowPrivate: false }), host).toMatchObject({
        ok: false,
        reason: 'private_target',
      })
    }
  })

  it('refuses to open a socket to such a literal at connect time', async () => {
    const connect = guardedConnector(1000)
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
      connect(
        { hostname: '[::ffff:7f00:1]', host: '[::ffff:7f00:1]:80', protocol: 'http:', port: '80' },
        (...args: unknown[]) => resolve(args[0] as NodeJS.ErrnoException | null),
      )
    })
    expect(err?.code).toBe('ERR_TOLLGATE_PRIVATE_TARGET')
  })
})
