import { Controller, Get, Inject, Injectable, Module, Scope, type DynamicModule, type INestApplication, type Type } from '@nestjs/common';
import { REQUEST } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { LockContext } from '../../lib/core/leases/lock-context.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { ZkLockTestingModule } from '../../lib/testing/index.js';
import { zkConnectString } from '../support/helpers.js';

// Providers and controllers Nest builds per request or per consumer (Scope.REQUEST, Scope.TRANSIENT,
// or request-scoped because they inject REQUEST) boot with @WithLock and run under the lock, with
// ZkLockModule (global, or imported where they are) and with the testing module.

/** What ran under the lock: the name LockContext reports inside the method. */
const heldInside = () => LockContext.current()?.name ?? 'no lock';

@Injectable({ scope: Scope.REQUEST })
class PerRequestReports {
  @WithLock('scoped-report')
  async build(): Promise<string> {
    return heldInside();
  }
}

@Injectable({ scope: Scope.TRANSIENT })
class TransientReports {
  @WithLock('transient-report')
  async build(): Promise<string> {
    return heldInside();
  }
}

/** Request-scoped only because it injects REQUEST. */
@Injectable()
class RequestAwareReports {
  constructor(@Inject(REQUEST) private readonly request: { url?: string }) {}

  @WithLock('request-aware-report')
  async build(): Promise<string> {
    return `${heldInside()} for ${this.request.url}`;
  }
}

@Controller({ path: 'scoped', scope: Scope.REQUEST })
class PerRequestController {
  constructor(private readonly transient: TransientReports) {}

  @Get()
  @WithLock('scoped-handler')
  async handle(): Promise<string> {
    return heldInside();
  }

  @Get('transient')
  async viaTransient(): Promise<string> {
    return this.transient.build();
  }
}

/** Request-scoped implicitly: it injects a request-scoped provider and REQUEST. */
@Controller('implicit')
class ImplicitController {
  constructor(
    private readonly reports: PerRequestReports,
    private readonly aware: RequestAwareReports,
  ) {}

  @Get()
  @WithLock('implicit-handler')
  async handle(): Promise<string> {
    return heldInside();
  }

  @Get('reports')
  async reportsUnderLock(): Promise<string> {
    return `${await this.reports.build()} / ${await this.aware.build()}`;
  }
}

const scoped = { providers: [PerRequestReports, TransientReports, RequestAwareReports], controllers: [PerRequestController, ImplicitController] };

async function start(root: Type | DynamicModule): Promise<{ app: INestApplication; url: string }> {
  const moduleRef = await Test.createTestingModule({ imports: [root] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.listen(0, '127.0.0.1');
  return { app, url: await app.getUrl() };
}

async function text(url: string): Promise<string> {
  const response = await fetch(url);
  expect(response.status).toBe(200);
  return response.text();
}

const real = (isGlobal: boolean) => ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-scopes-${process.pid}`, isGlobal });

describe.each([
  ['ZkLockModule (global)', () => ({ module: class GlobalRoot {}, imports: [real(true), { module: class Feature {}, ...scoped }] })],
  ['ZkLockModule imported by the module itself (isGlobal: false)', () => ({ module: class LocalRoot {}, imports: [real(false)], ...scoped })],
  ['ZkLockTestingModule', () => ({ module: class TestingRoot {}, imports: [ZkLockTestingModule.forRoot(), { module: class Feature {}, ...scoped }] })],
  ['ZkLockTestingModule imported by the module itself (isGlobal: false)', () => ({ module: class LocalTestingRoot {}, imports: [ZkLockTestingModule.forRoot({ isGlobal: false })], ...scoped })],
] as [string, () => DynamicModule][])('@WithLock on request-scoped and transient classes under %s', (_label, root) => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await start(root()));
  });
  afterAll(async () => {
    await app?.close();
  });

  it('boots, and a request to a request-scoped controller runs its handler under the lock', async () => {
    expect(await text(`${url}/scoped`)).toBe('scoped-handler');
  });

  it('runs a transient provider\'s method under the lock', async () => {
    expect(await text(`${url}/scoped/transient`)).toBe('transient-report');
  });

  it('runs the handler of a controller request-scoped by its dependencies under the lock', async () => {
    expect(await text(`${url}/implicit`)).toBe('implicit-handler');
  });

  it('runs the methods of request-scoped providers (explicit, and by injecting REQUEST) under the lock', async () => {
    expect(await text(`${url}/implicit/reports`)).toBe('scoped-report / request-aware-report for /implicit/reports');
  });
});

describe('a request-scoped @WithLock class in a module that cannot see LockService', () => {
  it('still fails the bootstrap, naming the fix', async () => {
    @Module({ providers: [PerRequestReports] })
    class Isolated {}
    @Module({ imports: [real(false), Isolated] })
    class Root {}
    const app = (await Test.createTestingModule({ imports: [Root] }).compile()).createNestApplication({ logger: false });
    try {
      await expect(app.init()).rejects.toThrow(/@WithLock on PerRequestReports\.build: Isolated cannot see LockService/);
    } finally {
      await app.close();
    }
  });
});
