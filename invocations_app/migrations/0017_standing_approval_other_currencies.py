"""A standing approval covers the currency it was granted on, capped or not, plus those its
approver names (``other_currencies``, uncapped only).

From now on ``currency`` is the granting call's even without a cap. Rows written before kept ""
when uncapped: such a row now covers only calls that state no currency (a call in a currency
goes to a person). Standing approvals last at most a day, so nothing is backfilled.
"""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('invocations_app', '0016_invocation_state_notify_answers'),
    ]

    operations = [
        migrations.AddField(
            model_name='standingapproval',
            name='other_currencies',
            field=models.JSONField(blank=True, default=list, help_text='ISO 4217 codes the approver also named'),
        ),
        migrations.AddConstraint(
            model_name='standingapproval',
            constraint=models.CheckConstraint(condition=models.Q(('max_amount__isnull', True), ('other_currencies', []), _connector='OR'), name='invocations_standing_cap_one_currency'),
        ),
    ]
