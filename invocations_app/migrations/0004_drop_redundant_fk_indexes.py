"""Drop single-column FK indexes that a composite index or constraint already leads with.

Every admission inserted into each of them. replay_of and edited_from are mostly NULL: a
partial index each replaces the full one. On SQLite these AlterFields rebuild the tables, which
drops their triggers, so the SPEC guards are installed again afterwards (and, going back,
after the reverse rebuild).
"""
import django.db.models.deletion
from django.db import migrations, models

from toolops import db_guards


class Migration(migrations.Migration):

    dependencies = [
        ('invocations_app', '0003_indexes_for_large_tables'),
        ('specs_app', '0001_initial'),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, db_guards.install),
        migrations.AlterField(
            model_name='event',
            name='invocation',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='events', to='invocations_app.invocation'),
        ),
        migrations.AlterField(
            model_name='invocation',
            name='edited_from',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='edits', to='invocations_app.invocation'),
        ),
        migrations.AlterField(
            model_name='invocation',
            name='run',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='invocations', to='invocations_app.run'),
        ),
        migrations.AlterField(
            model_name='invocation',
            name='tenant',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='invocations', to='specs_app.tenant'),
        ),
        migrations.AlterField(
            model_name='proposal',
            name='model_call',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='proposals', to='invocations_app.modelcall'),
        ),
        migrations.AlterField(
            model_name='proposal',
            name='replay_of',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='replays', to='invocations_app.invocation'),
        ),
        migrations.AddIndex(
            model_name='invocation',
            index=models.Index(condition=models.Q(('edited_from__isnull', False)), fields=['edited_from'], name='invocations_inv_edited'),
        ),
        migrations.AddIndex(
            model_name='proposal',
            index=models.Index(condition=models.Q(('replay_of__isnull', False)), fields=['replay_of'], name='invocations_proposal_replay'),
        ),
        migrations.RunPython(db_guards.install, migrations.RunPython.noop),
    ]
