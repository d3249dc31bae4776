/** `npm run routes`: writes docs/reference.md from the route table. */
import { writeFile } from 'node:fs/promises';
import { renderReference } from '../src/routes/reference.js';
import { ROUTES } from '../src/routes/table.js';

await writeFile(new URL('../docs/reference.md', import.meta.url), renderReference(ROUTES));
process.stdout.write('docs/reference.md written\n');
