import { describe, expect, it } from 'vitest'
import { checkTargetUrl, isPrivateAddress } from '../src/ssrf.ts'

describe('isPrivateAddress', () => {
  it('flags loopback, private, link-local, metadata and mapped addresses', () => {
    for (const ip of [
      '127.0.0.1',
      '10.1.2.3',
      '172.16.0.1',
      '192.168.1.1',
      '169.254.169.254',
      '0.0.0.0',
      '::1',
      'fe80::1',
      'fd00::1',
      '::ffff:127.0.0.1',
      '100.64.0.1',
    ]) {
      expect(isPrivateAddress(ip), ip).toBe(true)
    }
    for (const ip of ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '172.32.0.1']) {
      expect(isPrivateAddress(ip), ip).toBe(false)
    }
  })
})

describe('checkTargetUrl', () => {
  it('refuses private targets unless allowed', async () => {
    expect(await checkTargetUrl('http://127.0.0.1:8080/x', { allowPrivate: false })).toMatchObject({
      ok: false,
      reason: 'private_target',
    })
    expect(await checkTargetUrl('http://169.254.169.254/latest', { allowPrivate: false })).toMatchObject({
      ok: false,
      reason: 'private_target',
    })
    expect(await checkTargetUrl('http://[::1]/', { allowPrivate: false })).toMatchObject({
      ok: false,
      reason: 'private_target',
    })
    expect(await checkTargetUrl('http://localhost:1/', { allowPrivate: false })).toMatchObject({
      ok: false,
      reason: 'private_target',
    })
    expect(await checkTargetUrl('http://127.0.0.1:8080/x', { allowPrivate: true })).toMatchObject({
      ok: true,
    })
  })
  it('refuses other schemes, credentials and garbage', async () => {
    expect(await checkTargetUrl('ftp://example.com', { allowPrivate: true })).toMatchObject({
      ok: false,
      reason: 'unsupported_scheme',
    })
    expect(await checkTargetUrl('file:///etc/passwd', { allowPrivate: true })).toMatchObject({
      ok: false,
      reason: 'unsupported_scheme',
    })
    expect(await checkTargetUrl('http://u:p@example.com', { allowPrivate: true })).toMatchObject({
      ok: false,
      reason: 'invalid_url',
    })
    expect(await checkTargetUrl('not a url', { allowPrivate: true })).toMatchObject({
      ok: false,
      reason: 'invalid_url',
    })
  })
})
