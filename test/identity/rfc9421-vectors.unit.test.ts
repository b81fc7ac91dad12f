// RFC 9421 Appendix B.2: the published signature bases and signatures for the algorithms node:crypto
// verifies (rsa-pss-sha512 B.2.1–B.2.3, ecdsa-p256-sha256 B.2.4, hmac-sha256 B.2.5, ed25519 B.2.6).
import { createPublicKey, createSecretKey } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { type Algorithm, verifyWith } from '../../src/identity/algorithms.ts'
import { buildSignatureBase, type MessageView } from '../../src/identity/signature-base.ts'
import { isInnerList, parseDictionary } from '../../src/identity/structured-fields.ts'

const RSA_PSS_PUB = `-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAr4tmm3r20Wd/PbqvP1s2
+QEtvpuRaV8Yq40gjUR8y2Rjxa6dpG2GXHbPfvMs8ct+Lh1GH45x28Rw3Ry53mm+
oAXjyQ86OnDkZ5N8lYbggD4O3w6M6pAvLkhk95AndTrifbIFPNU8PPMO7OyrFAHq
gDsznjPFmTOtCEcN2Z1FpWgchwuYLPL+Wokqltd11nqqzi+bJ9cvSKADYdUAAN5W
Utzdpiy6LbTgSxP7ociU4Tn0g5I6aDZJ7A8Lzo0KSyZYoA485mqcO0GVAdVw9lq4
aOT9v6d+nb4bnNkQVklLQ3fVAvJm+xdDOp9LCNCN48V2pnDOkFV6+U9nV5oyc6XI
2wIDAQAB
-----END PUBLIC KEY-----`
const ECC_P256_PUB = `-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqIVYZVLCrPZHGHjP17CTW0/+D9Lf
w0EkjqF7xB4FivAxzic30tMM4GF+hR6Dxh71Z50VGGdldkkDXZCnTNnoXQ==
-----END PUBLIC KEY-----`
const ED25519_PUB = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----`
const SHARED_SECRET =
  'uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ=='

function view(headers: Record<string, string>, extra: Partial<MessageView> = {}): MessageView {
  return {
    method: 'POST',
    scheme: 'https',
    authority: 'example.com',
    path: '/foo',
    query: 'param=Value&Pet=dog',
    header: (name) => headers[name],
    ...extra,
  }
}
const request = view({
  host: 'example.com',
  date: 'Tue, 20 Apr 2021 02:07:55 GMT',
  'content-type': 'application/json',
  'content-digest':
    'sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:',
  'content-length': '18',
})
const response = view(
  {
    date: 'Tue, 20 Apr 2021 02:07:56 GMT',
    'content-type': 'application/json',
    'content-digest':
      'sha-512=:mEWXIS7MaLRuGgxOBdODa3xqM1XdEvxoYhvlCFJ41QJgJc4GTsPp29l5oGX69wWdXymyU0rjJuahq4l5aGgfLQ==:',
    'content-length': '23',
  },
  { status: 200 },
)

const rsaPss = createPublicKey(RSA_PSS_PUB)
const vectors: Array<{
  name: string
  alg: Algorithm
  key: ReturnType<typeof createPublicKey>
  msg: MessageView
  input: string
  signature: string
  base: string
}> = [
  {
    name: 'B.2.1 minimal, rsa-pss-sha512',
    alg: 'rsa-pss-sha512',
    key: rsaPss,
    msg: request,
    input: 'sig-b21=();created=1618884473;keyid="test-key-rsa-pss";nonce="b3k2pp5k7z-50gnwp.yemd"',
    signature:
      'sig-b21=:d2pmTvmbncD3xQm8E9ZV2828BjQWGgiwAaw5bAkgibUopemLJcWDy/lkbbHAve4cRAtx31Iq786U7it++wgGxbtRxf8Udx7zFZsckzXaJMkA7ChG52eSkFxykJeNqsrWH5S+oxNFlD4dzVuwe8DhTSja8xxbR/Z2cOGdCbzR72rgFWhzx2VjBqJzsPLMIQKhO4DGezXehhWwE56YCE+O6c0mKZsfxVrogUvA4HELjVKWmAvtl6UnCh8jYzuVG5WSb/QEVPnP5TmcAnLH1g+s++v6d4s8m0gCw1fV5/SITLq9mhho8K3+7EPYTU8IU1bLhdxO5Nyt8C8ssinQ98Xw9Q==:',
    base: '"@signature-params": ();created=1618884473;keyid="test-key-rsa-pss";nonce="b3k2pp5k7z-50gnwp.yemd"',
  },
  {
    name: 'B.2.2 selective components, rsa-pss-sha512',
    alg: 'rsa-pss-sha512',
    key: rsaPss,
    msg: request,
    input:
      'sig-b22=("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example"',
    signature:
      'sig-b22=:LjbtqUbfmvjj5C5kr1Ugj4PmLYvx9wVjZvD9GsTT4F7GrcQEdJzgI9qHxICagShLRiLMlAJjtq6N4CDfKtjvuJyE5qH7KT8UCMkSowOB4+ECxCmT8rtAmj/0PIXxi0A0nxKyB09RNrCQibbUjsLS/2YyFYXEu4TRJQzRw1rLEuEfY17SARYhpTlaqwZVtR8NV7+4UKkjqpcAoFqWFQh62s7Cl+H2fjBSpqfZUJcsIk4N6wiKYd4je2U/lankenQ99PZfB4jY3I5rSV2DSBVkSFsURIjYErOs0tFTQosMTAoxk//0RoKUqiYY8Bh0aaUEb0rQl3/XaVe4bXTugEjHSw==:',
    base: [
      '"@authority": example.com',
      '"content-digest": sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:',
      '"@query-param";name="Pet": dog',
      '"@signature-params": ("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example"',
    ].join('\n'),
  },
  {
    name: 'B.2.3 full coverage, rsa-pss-sha512',
    alg: 'rsa-pss-sha512',
    key: rsaPss,
    msg: request,
    input:
      'sig-b23=("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss"',
    signature:
      'sig-b23=:bbN8oArOxYoyylQQUU6QYwrTuaxLwjAC9fbY2F6SVWvh0yBiMIRGOnMYwZ/5MR6fb0Kh1rIRASVxFkeGt683+qRpRRU5p2voTp768ZrCUb38K0fUxN0O0iC59DzYx8DFll5GmydPxSmme9v6ULbMFkl+V5B1TP/yPViV7KsLNmvKiLJH1pFkh/aYA2HXXZzNBXmIkoQoLd7YfW91kE9o/CCoC1xMy7JA1ipwvKvfrs65ldmlu9bpG6A9BmzhuzF8Eim5f8ui9eH8LZH896+QIF61ka39VBrohr9iyMUJpvRX2Zbhl5ZJzSRxpJyoEZAFL2FUo5fTIztsDZKEgM4cUA==:',
    base: [
      '"date": Tue, 20 Apr 2021 02:07:55 GMT',
      '"@method": POST',
      '"@path": /foo',
      '"@query": ?param=Value&Pet=dog',
      '"@authority": example.com',
      '"content-type": application/json',
      '"content-digest": sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:',
      '"content-length": 18',
      '"@signature-params": ("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss"',
    ].join('\n'),
  },
  {
    name: 'B.2.4 response, ecdsa-p256-sha256',
    alg: 'ecdsa-p256-sha256',
    key: createPublicKey(ECC_P256_PUB),
    msg: response,
    input:
      'sig-b24=("@status" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-ecc-p256"',
    signature:
      'sig-b24=:wNmSUAhwb5LxtOtOpNa6W5xj067m5hFrj0XQ4fvpaCLx0NKocgPquLgyahnzDnDAUy5eCdlYUEkLIj+32oiasw==:',
    base: [
      '"@status": 200',
      '"content-type": application/json',
      '"content-digest": sha-512=:mEWXIS7MaLRuGgxOBdODa3xqM1XdEvxoYhvlCFJ41QJgJc4GTsPp29l5oGX69wWdXymyU0rjJuahq4l5aGgfLQ==:',
      '"content-length": 23',
      '"@signature-params": ("@status" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-ecc-p256"',
    ].join('\n'),
  },
  {
    name: 'B.2.5 hmac-sha256 (a configured shared key)',
    alg: 'hmac-sha256',
    key: createSecretKey(Buffer.from(SHARED_SECRET, 'base64')),
    msg: request,
    input: 'sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"',
    signature: 'sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:',
    base: [
      '"date": Tue, 20 Apr 2021 02:07:55 GMT',
      '"@authority": example.com',
      '"content-type": application/json',
      '"@signature-params": ("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"',
    ].join('\n'),
  },
  {
    name: 'B.2.6 ed25519',
    alg: 'ed25519',
    key: createPublicKey(ED25519_PUB),
    msg: request,
    input:
      'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
    signature:
      'sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:',
    base: [
      '"date": Tue, 20 Apr 2021 02:07:55 GMT',
      '"@method": POST',
      '"@path": /foo',
      '"@authority": example.com',
      '"content-type": application/json',
      '"content-length": 18',
      '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
    ].join('\n'),
  },
]

function parsed(input: string, signature: string) {
  const [label, list] = [...parseDictionary(input)!][0]!
  const sig = parseDictionary(signature)!.get(label)!
  if (!isInnerList(list) || isInnerList(sig) || !(sig.value instanceof Uint8Array))
    throw new Error('bad vector')
  return { list, bytes: sig.value }
}

describe('RFC 9421 appendix B.2 vectors', () => {
  for (const v of vectors) {
    it(`${v.name}: the base is the published one and the signature verifies`, () => {
      const { list, bytes } = parsed(v.input, v.signature)
      const base = buildSignatureBase(v.msg, list)
      expect(base).toEqual({ ok: true, base: v.base })
      expect(verifyWith(v.alg, v.key, v.base, bytes)).toBe(true)
    })
    it(`${v.name}: one changed byte of the message fails`, () => {
      const { list, bytes } = parsed(v.input, v.signature)
      const tampered = v.base
        .replace('example.com', 'example.org')
        .replace('200', '201')
        .replace('created=1618884473', 'created=1618884474')
      expect(verifyWith(v.alg, v.key, tampered, bytes)).toBe(false)
      expect(buildSignatureBase({ ...v.msg, authority: 'example.org' }, list).ok).toBe(true)
    })
  }
})
