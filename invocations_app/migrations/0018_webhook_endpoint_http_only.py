"""A webhook endpoint's URL is http(s) only (Django's URLField alone also takes ftp://); no column changes."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('invocations_app', '0017_run_on_behalf_of_user'),
        ('invocations_app', '0017_standing_approval_other_currencies'),
    ]

    operations = [
        migrations.AlterField(
            model_name='webhookendpoint',
            name='url',
            field=models.URLField(max_length=500, validators=[django.core.validators.URLValidator(message='Enter an http:// or https:// URL.', schemes=['http', 'https'])]),
        ),
    ]
