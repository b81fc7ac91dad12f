// Which target_session_attrs tollgate asks the driver for: read-write becomes primary (the driver's
// read-write accepts a PostgreSQL >= 14 hot standby); anything else is left to the driver as written.
import { afterEach, describe, expect, it } from 'vitest'
import { targetSessionAttrs } from '../../src/db/target-session.ts'

describe('targetSessionAttrs', () => {
  const saved = process.env.PGTARGETSESSIONATTRS
  afterEach(() => {
    if (saved === undefined) delete process.env.PGTARGETSESSIONATTRS
    else process.env.PGTARGETSESSIONATTRS = saved
  })

  it('asks for primary when a multi-host URL says read-write', () => {
    delete process.env.PGTARGETSESSIONATTRS
    expect(
      targetSessionAttrs(
        'postgres://u:p@db-a:5432,db-b:5432/tollgate?sslmode=require&target_session_attrs=read-write',
      ),
    ).toEqual({ target_session_attrs: 'primary' })
  })

  it('asks for primary when PGTARGETSESSIONATTRS says read-write and the URL says nothing', () => {
    process.env.PGTARGETSESSIONATTRS = 'read-write'
    expect(targetSessionAttrs('postgres://db-a,db-b/tollgate')).toEqual({ target_session_attrs: 'primary' })
  })

  it('leaves every other value, and no value, to the driver', () => {
    delete process.env.PGTARGETSESSIONATTRS
    expect(targetSessionAttrs('postgres://db-a/tollgate')).toEqual({})
    expect(targetSessionAttrs('postgres://db-a,db-b/t?target_session_attrs=prefer-standby')).toEqual({})
    expect(targetSessionAttrs('postgres://db-a,db-b/t?target_session_attrs=primary')).toEqual({})
    // The URL's value wins over the environment's, as in the driver.
    process.env.PGTARGETSESSIONATTRS = 'read-write'
    expect(targetSessionAttrs('postgres://db-a,db-b/t?target_session_attrs=any')).toEqual({})
  })
})
